"""Helpers the tests share: the model zoo (`zoo`), one-node ONNX models (`onnx_nodes`) and the
numeric check on `jaxport.compare` (`numeric`), and a module wrapping a function (`modules.Call`)."""
