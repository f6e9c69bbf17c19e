"""How stages run: the faust shell and process runner for Kafka, the embedded in-memory
runner behind `verify` and `eval`, settings, operator controls and telemetry."""
