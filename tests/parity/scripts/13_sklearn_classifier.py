"""scikit-learn tutorial: convert a classifier with skl2onnx, label and ZipMap probabilities."""

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

X, y = load_iris(return_X_y=True)
X = X.astype(np.float32)
clf = LogisticRegression(max_iter=500).fit(X, y)
onx = to_onnx(clf, X[:1], target_opset=17)

sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
input_name = sess.get_inputs()[0].name
for out in sess.get_outputs():
    print(out.name, out.shape, out.type)
labels, probabilities = sess.run(None, {input_name: X[:5]})
print(labels.tolist(), labels.dtype)
print(type(probabilities).__name__, len(probabilities), type(probabilities[0]).__name__)
print(sorted(probabilities[0]), [round(float(p), 4) for p in probabilities[0].values()])
print("agrees with sklearn:", labels.tolist() == clf.predict(X[:5]).tolist())
print("overridable initializers:", len(sess.get_overridable_initializers()))
