"""`python -m llama_cpp.server` with llama.cpp's extra (repacking) buffer types off, as
llama.cpp's own `--no-repack` does.

Built from its sdist on a CPU that reports AMX, llama-cpp-python 0.3.36's ggml takes the
AMX path for the model's matrix products, and `ggml_backend_amx_mul_mat` segfaults on the
first completion (seen on the test machines: the server dies at its first request, with
or without `logits_all`). 0.3.36 has no setting for `use_extra_bufts`, so this launcher
sets it in the model's default parameters before the server loads the model; the rest
of the command line is the server's. The tests' server is 135M parameters: repacking
buys nothing there.
"""

from __future__ import annotations

import runpy

import llama_cpp.llama_cpp as lib

_default = lib.llama_model_default_params


def _without_extra_buffers() -> lib.llama_model_params:
    params = _default()
    params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _without_extra_buffers

if __name__ == "__main__":
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
