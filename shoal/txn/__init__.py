"""Transactions: Kafka's transaction coordinator (exactly-once produce).

- ``coordinator``: :class:`TransactionCoordinator`, one per broker (``services.txn``): owns the
  ``__transaction_state`` partitions this node leads, InitProducerId / AddPartitionsToTxn /
  AddOffsetsToTxn / EndTxn, KIP-890 verification, timeouts and id expiration;
- ``metadata``: one transactional id's state and its transitions (pure);
- ``records``: Kafka's TransactionLogKey / TransactionLogValue formats;
- ``markers``: commit/abort markers written to the transaction's partitions (locally or with
  WriteTxnMarkers to their leaders).

The partition side (producer state, LSO, aborted-transaction index) is ``shoal.storage``; the
wire handlers are ``shoal.handlers.transactions`` and ``shoal.handlers.producer_ids``.
"""

from shoal.txn.coordinator import InitResult, TransactionCoordinator, TxnConfig
from shoal.txn.markers import MarkerWriter, write_local_markers
from shoal.txn.metadata import TransactionMetadata, Transit
from shoal.txn.records import TXN_STATE_TOPIC, TxnLogValue, TxnState

__all__ = [
    "TXN_STATE_TOPIC",
    "InitResult",
    "MarkerWriter",
    "TransactionCoordinator",
    "TransactionMetadata",
    "Transit",
    "TxnConfig",
    "TxnLogValue",
    "TxnState",
    "write_local_markers",
]
