"""Trust (issue 46): TLS contexts and principals, certificates for tests and `make up`."""
