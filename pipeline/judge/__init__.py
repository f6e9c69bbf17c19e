"""The LLM judge: the one question it is asked and how its first-token logprobs are read
(`question`), the context it reads (`context`), its budgets per route and tenant
(`budget`) and the verdict cache. It may import `rungs`, `trail`, `scores` and the rooms
below them; the judge's stage function is `pipeline.stages.judge`.
"""
