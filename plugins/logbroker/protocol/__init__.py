"""Bytes only: messages, message sets, compression, requests and responses of Kafka 0.7."""
