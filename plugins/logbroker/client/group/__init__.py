"""The parts of the group consumer, `logbroker.client.group_consumer.GroupConsumer`.

Import from `logbroker.client.group_consumer`: these modules are its inside, one concept each.

    context.py      all that the parts know of the consumer: its settings, counters, deliver
                    lock, clock and sleep (ConsumerContext), built by the facade
    stream.py       what the application reads (MessageStream, GroupMessage), the queue that
                    feeds a stream (ChunkQueue, all the parts see of it), and the state of one
                    owned partition (fetched, consumed, committed offsets)
    fetcher.py      one thread per broker fetching the owned partitions into the streams
    membership.py   the ZooKeeper side: the layout, the ids node, owner claims and releases,
                    offsets read and committed, the cluster reads a rebalance needs
    rebalance.py    one rebalance attempt (§7.1) and the partitions and fetchers it leaves
    coordinator.py  the rebalance thread: watches, retries with backoff, session renewal,
                    autocommit, and the serialised commit and close

The connector itself (configuration, public API, lifecycle) is `GroupConsumer` in
`logbroker.client.group_consumer`; the parts never see it, only its ConsumerContext.
"""
