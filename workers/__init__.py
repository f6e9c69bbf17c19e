"""groundstream's shell: everything that moves messages, talks to endpoints or serves people.

Start reading here:

* `stages/`  one adapter per rung of the ladder (decode, call `pipeline/`, emit), the
  shared `kit` (emits, context, `conclude`), the stage table `ladder`, the `terminal`
  writer (each candidate's outcome, once), human `review`.
* `runtime/` how stages run: the transactional Kafka `loop` (with its changelog `store`
  and per-candidate `isolation`), the process `runner`, the `embedded` in-memory runner
  and `verify`, `settings`, `control`, `telemetry`, and the small Kafka tools.
* `clients/` I/O with models: OpenAI-compatible endpoints (`llm`, `endpoints`), the
  sentence `encoder`, an NLI cross-encoder (`nli`).
* `eval/`    labelled `datasets`, `calibration`, `evaluation` and its reports.
* `web/`     the dashboard: `state` (aggregates), `feed` (Kafka in and out), `app` (HTTP).
* `cli/`     the `groundstream` command, one module per command group (`base`: shared).
"""
