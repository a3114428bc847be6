"""Who a connection is: SASL mechanisms (scram.py), the credentials kept in ZooKeeper
(credentials.py) and the exchange a connection runs before its first request (sasl.py).
Pure code and ZooKeeper reads: the server and the client wire them into their connections."""
