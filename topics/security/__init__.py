"""What a stage may prove and what a client may not leak: per-stage signing keys, the
signatures on conclusions and decision records, and the security checks of the one Kafka
client factory (`topics.clients`). Imports only `pipeline` and `topics`' floor modules."""
