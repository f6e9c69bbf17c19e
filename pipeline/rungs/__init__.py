"""The rules of the rungs after geometry that are too large for their stage module: the
grounding switch, consistency over sampled answers, and the last rung's deterministic
rule checks. It may import `scores`, `guards`, `claims`, `bounds` and `encoding`; the stage
functions that call them live in `pipeline.stages`.
"""
