"""Helpers the tests share: the model zoo (`zoo`) and one-node ONNX models (`onnx_nodes`)."""
