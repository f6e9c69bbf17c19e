"""One module per rung of the ladder, each holding that rung's whole rule as pure functions
that return a `Verdict` (`pipeline.trail.verdict`).

    geometry     candidates → scored      `screen` before encoding, `decide` after
    switch       scored → rules | consistency | judge | escalations.*
    consistency  consistency → rules | judge
    judge        judge → rules | escalations.*
    rules        rules → state | escalations.review | escalations.reject
    review       a person's verdict → rules | escalations.reject
    terminal     concluded → the one outcome per candidate id (`deliver` or supersede)

A stage adapter in `workers/stages/` decodes its messages, does the stage's I/O (encoder,
model endpoints, Kafka) and hands what it read to these functions; the Kafka workers, the
embedded runner (`groundstream verify`) and a library user calling them directly get the
same verdict for the same input. Nothing here reads a clock, a socket or a model: time
comes in as `now`, samples and model replies as values.

The building blocks they compose live in the rooms below (`pipeline.rungs`, `pipeline.judge`,
`pipeline.policy`, `pipeline.trail`, ...); a module here is where a reader finds the rung's
rule in one place. This room may import every room of the core except `pipeline.fit`;
nothing in the core imports it.
"""
