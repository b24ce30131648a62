"""A benchmark of onnxflow against onnxruntime and onnx.reference, run side by side.

    python -m onnxflow.bench                  # every workload, full size
    python -m onnxflow.bench --quick          # a smoke run with tiny sizes (CI)
    python -m onnxflow.bench --only rnn --only loop_elementwise --repeats 9 --json out.json
    python -m onnxflow.bench --threads 1      # onnxflow's and onnxruntime's intra-op threads

``--only`` takes workload names or their prefixes; the workloads are listed in
:mod:`onnxflow.bench.workloads`, plus ``peak_memory``. onnxruntime, scikit-learn and skl2onnx
are optional: without them the bench says what it skipped. Each engine runs in a process of
its own, without the OpenBLAS pin (:mod:`onnxflow.bench.process`).
"""
