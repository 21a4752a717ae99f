"""Checkpoints in and out: the original TF ALBERT checkpoints (read without TensorFlow), HF directories, and
exports for inference (ONNX, TorchScript)."""
