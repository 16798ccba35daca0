"""Reference suites run through jaxport: PyTorch's OpInfo database (`opinfo`), ONNX's node
conformance cases (`onnx`) and those cases through generated code (`codegen`)."""
