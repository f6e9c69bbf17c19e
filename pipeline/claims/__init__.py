"""Claim support: how far the context backs what an answer claims.

* `units.py` — the units read: an answer's claims and core, the context's passage windows.
* `support.py` — lexical source support, word by word (the rules' `source_support` and a
  grounding feature).
* `facts.py` — which unsupported numbers and names are claims, and which are artefacts.
* `head.py` — the claim head: pair features and the small model giving P(supported).
* `reader.py` — the claim reader: a cross-encoder over a claim and its evidence.
* `readers.py` — the one reader slot: reader directories (`reader.json`, hashes, labels)
  and loading any reader, published or trained here.
* `classifiers.py` — published pair and token classifiers served on ONNX Runtime.

It may import only `encoding` and `bounds` (and `errors`); whether a grounding model
weighs the reader is the scores' question (`pipeline.scores.grounding`).
"""
