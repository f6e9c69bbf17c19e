"""I/O with models: OpenAI-compatible chat endpoints with their breakers, the sentence
encoder, and an optional NLI cross-encoder."""
