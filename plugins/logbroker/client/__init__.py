"""What applications use: connections, producers, the simple and the group consumer."""
