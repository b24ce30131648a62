"""skl2onnx classifier with zipmap disabled and a decision tree: probabilities as a tensor."""

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.datasets import load_iris
from sklearn.tree import DecisionTreeClassifier

X, y = load_iris(return_X_y=True)
X = X.astype(np.float32)
clf = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
onx = to_onnx(clf, X[:1], options={"zipmap": False}, target_opset=17)
sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
print([(o.name, o.type, o.shape) for o in sess.get_outputs()])
label, proba = sess.run(None, {"X": X[::30]})
print(label.tolist(), np.round(proba, 3).tolist())
print("agrees:", np.allclose(proba, clf.predict_proba(X[::30]), atol=1e-6))

onx_zip = to_onnx(clf, X[:1], target_opset=17)
sess_zip = ort.InferenceSession(onx_zip.SerializeToString(), providers=["CPUExecutionProvider"])
print([(o.name, o.type, o.shape) for o in sess_zip.get_outputs()])
