"""Trust (issue 46): who may do what on the brokers (acls.py: the authorizer's ACLs)."""
