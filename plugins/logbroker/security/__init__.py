"""Trust (issue 46): who a connection is and what it may do.

    tls.py, listeners.py, certificates.py  TLS contexts and the principal a certificate
                                        names, a broker's listeners, certificates for tests
                                        and `make up`
    scram.py, sasl.py, credentials.py   SASL mechanisms, the exchange a connection runs
                                        before its first request, and the users'
                                        credentials kept in ZooKeeper
    acls.py, acl_store.py               the authorizer's ACLs: Kafka's model, and their copy
                                        kept from ZooKeeper
    client.py                           a client's credentials (TLS and a SASL login) from
                                        Kafka's client property names, for every part of
                                        the pipeline that connects to brokers
Pure code and ZooKeeper reads: the server and the client wire them into their connections."""
