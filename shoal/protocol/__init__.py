"""Wire codec: framing, headers, message payloads (kio) and RecordBatch v2 access. No I/O here."""
