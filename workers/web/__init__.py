"""The web dashboard: `state` folds sanitized records, `feed` reads Kafka and acts for the
page, `app` serves HTTP (bound to 127.0.0.1 unless told otherwise)."""
