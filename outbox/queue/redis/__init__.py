"""The Redis Streams broker: the relay's target and the broker worker's transport."""
