"""The text and its encoder: a context as its chunks, the text-keyed cache, token counts,
and the sentence encoder on torch or ONNX Runtime (with the one int8 recipe). The lowest
room: it imports only the modules at the top of `pipeline/` (`errors`, `files`).
"""
