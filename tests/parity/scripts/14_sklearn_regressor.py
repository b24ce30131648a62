"""scikit-learn pipeline regressor via skl2onnx: compare with predict."""

import numpy as np
import onnxruntime as rt
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

X, y = load_diabetes(return_X_y=True)
X = X.astype(np.float32)
pipe = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(X, y)
onx = convert_sklearn(
    pipe, initial_types=[("float_input", FloatTensorType([None, X.shape[1]]))], target_opset=17
)

sess = rt.InferenceSession(onx.SerializeToString(), providers=rt.get_available_providers()[-1:])
input_name = sess.get_inputs()[0].name
label_name = sess.get_outputs()[0].name
print(input_name, label_name, sess.get_inputs()[0].shape, sess.get_outputs()[0].shape)
pred = sess.run([label_name], {input_name: X[:10]})[0]
print(pred.shape, pred.dtype)
print(np.round(pred.ravel(), 2).tolist())
print("close to sklearn:", np.allclose(pred.ravel(), pipe.predict(X[:10]), rtol=1e-3, atol=1e-2))
