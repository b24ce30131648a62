import sys

from onnxflow.cli.parser import main

sys.exit(main())
