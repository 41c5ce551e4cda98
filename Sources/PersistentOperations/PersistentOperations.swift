@_exported import RetryingOperation
