"""The policy as a whole: the TOML document and its routes, modes and deadlines, session
holds, the switch's deferral to the judge, the endpoint breaker, the attach mapping, and
the shipped defaults a library user gets. It sits above every rung's room, since it holds
each rung's settings, and may import any room below it; within the core only
`pipeline.stages`, `pipeline.fit` and `pipeline` itself import it.
"""
