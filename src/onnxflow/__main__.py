from onnxflow.cli import main

raise SystemExit(main())
