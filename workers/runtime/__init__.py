"""How stages run: the transactional Kafka loop and process runner, the embedded in-memory
runner behind `verify` and `eval`, settings, operator controls and telemetry."""
