"""The ``onnxflow`` command: ``run`` a model on given or generated inputs, ``check`` a model,
``profile`` one run, print the ``code`` onnxflow runs for it, ``compare`` two runs,
``export-python`` a model.

:mod:`~onnxflow.cli.parser` holds the arguments and :func:`main`; :mod:`~onnxflow.cli.feeds`
the inputs a run is fed (:mod:`~onnxflow.cli.index_ranges`: the ranges the graph implies for
generated ones); :mod:`~onnxflow.cli.commands` the subcommands that run a model;
:mod:`~onnxflow.cli.check` the ``check`` report; :mod:`~onnxflow.cli.progress` the progress line.
"""

from __future__ import annotations

from onnxflow.cli.check import OpUse, count_ops, operator_uses
from onnxflow.cli.feeds import generate_input, summarize
from onnxflow.cli.parser import main
from onnxflow.cli.progress import Progress

__all__ = [
    "OpUse",
    "Progress",
    "count_ops",
    "generate_input",
    "main",
    "operator_uses",
    "summarize",
]
