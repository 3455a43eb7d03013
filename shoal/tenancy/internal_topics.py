"""The internal topics' names, below every layer that reads or writes them: the coordinators'
(``shoal.groups``, ``shoal.txn``), metering's, and the handlers that refuse or allow clients on
them (the produce handler lets brokers write the usage topic). Created by
``shoal.tenancy.creation.InternalTopic``. No imports: the metering pipeline's Spark side reads
the usage topic's name too.
"""

OFFSETS_TOPIC = "__consumer_offsets"  # the group coordinator's committed offsets and groups
TXN_STATE_TOPIC = "__transaction_state"  # the transaction coordinator's log
USAGE_TOPIC = "__shoal_usage"  # metering's usage records (docs/metering.md)
