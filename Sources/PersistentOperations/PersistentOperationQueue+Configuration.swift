import Foundation

extension PersistentOperationQueue {
    /// Settings of a ``PersistentOperationQueue``.
    ///
    /// ```swift
    /// var configuration = PersistentOperationQueue.Configuration()
    /// configuration.crashLoopLimit = 5
    /// let queue = try PersistentOperationQueue(directory: storeURL, operationQueue: OperationQueue(),
    ///                                          configuration: configuration)
    /// ```
    public struct Configuration: Sendable {
        /// The default ``crashLoopLimit``: 3 consecutive crashes during an attempt.
        public static let defaultCrashLoopLimit = 3
        /// The default ``maximumRecordSize``: 1 MiB, far above a typical payload (under 1 KiB)
        /// and small enough that restoring thousands of records stays fast.
        public static let defaultMaximumRecordSize = RecordFormat.defaultMaximumRecordSize

        /// After how many consecutive launches that ended while one of its attempts was
        /// running an operation is moved to the failed area instead of run again.
        /// Default: ``defaultCrashLoopLimit``. Must be at least 1.
        public var crashLoopLimit: Int {
            didSet { precondition(crashLoopLimit >= 1, "crashLoopLimit must be at least 1") }
        }
        /// The largest record file written (larger payloads are refused) or read (larger
        /// files are quarantined), in bytes. Default: ``defaultMaximumRecordSize``.
        public var maximumRecordSize: Int {
            didSet { precondition(maximumRecordSize > RecordFormat.headerSize, "maximumRecordSize is too small to hold a record") }
        }
        /// The clock and timer for not-before dates and for the retry waits of operations
        /// that use the default scheduler. Default: a `DispatchRetryScheduler`. Tests pass a
        /// `ManualRetryScheduler` to move time by hand.
        public var scheduler: any RetryScheduler
        /// Receives the queue's log messages, on the queue's private serial queue for events
        /// and in order with them (never while the queue holds a lock of its own). Default:
        /// `nil` (no logging).
        public var logHandler: RetryLogHandler?

        /// The file system the store goes through (fault injection in tests).
        package var fileSystem: FileSystem = .system

        /// Creates settings; every parameter's default is documented on its property.
        public init(
            crashLoopLimit: Int = defaultCrashLoopLimit,
            maximumRecordSize: Int = defaultMaximumRecordSize,
            scheduler: any RetryScheduler = DispatchRetryScheduler(),
            logHandler: RetryLogHandler? = nil
        ) {
            precondition(crashLoopLimit >= 1, "crashLoopLimit must be at least 1")
            precondition(maximumRecordSize > RecordFormat.headerSize, "maximumRecordSize is too small to hold a record")
            self.crashLoopLimit = crashLoopLimit
            self.maximumRecordSize = maximumRecordSize
            self.scheduler = scheduler
            self.logHandler = logHandler
        }
    }
}
