"""Stage adapters: one module per rung of the ladder, each a thin shell over `pipeline/`.

`kit` holds what they share (emits, context, `conclude`, dead letters), `common` the
envelope decoding and the deadline gate, `ladder` the stage table every entry point loops
over, and `review` the human rung (the queue and a person's verdict)."""
