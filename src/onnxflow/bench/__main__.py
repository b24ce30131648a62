from onnxflow.bench.cli import main

raise SystemExit(main())
