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
        /// The default ``crashLoopLimit``: 3 crashes while the operation's attempt ran alone
        /// (or 3 kills in a row while it ran alone and the app was active).
        public static let defaultCrashLoopLimit = 3
        /// The default ``maximumRecordSize``: 1 MiB, far above a typical payload (under 1 KiB)
        /// and small enough that restoring thousands of records stays fast.
        public static let defaultMaximumRecordSize = RecordFormat.defaultMaximumRecordSize

        /// After how many crashes attributed to it — or kills in a row — an operation is moved
        /// to the failed area instead of run again. Default: ``defaultCrashLoopLimit``. Must be
        /// at least 1.
        ///
        /// A crash is attributed to an operation only when its attempt was the only one in
        /// flight; after a crash with several in flight, each of them runs its next attempt
        /// alone. A kill (SIGKILL, which no handler sees: iOS kills an app that exhausts memory
        /// or hangs this way) is attributed to an operation only when the app was active
        /// (``PersistentOperationQueue/applicationState``) and its attempt ran alone; after a
        /// kill while active with several in flight, each of them runs its next attempt alone
        /// once the other due work is done, and the kills on file are cleared. A kill while the
        /// app is not active is attributed to nobody. See <doc:ResumingAfterACrash>.
        /// At least 1: a queue opened with less throws ``PersistenceError/Code/invalidOptions``.
        public var crashLoopLimit: Int
        /// The largest record file written (larger payloads are refused) or read (larger
        /// files are quarantined), in bytes. Default: ``defaultMaximumRecordSize``.
        /// More than the record header's 20 bytes: a queue opened with less throws
        /// ``PersistenceError/Code/invalidOptions``.
        public var maximumRecordSize: Int
        /// The clock and timer for not-before dates and for the retry waits of operations
        /// that use the default scheduler. Default: a `DispatchRetryScheduler`. Tests pass a
        /// `ManualRetryScheduler` to move time by hand.
        public var scheduler: any RetryScheduler
        /// Receives the queue's log messages, on the queue's private serial queue for events
        /// and in order with them (never while the queue holds a lock of its own). Default:
        /// `nil` (no logging).
        public var logHandler: RetryLogHandler?
        /// Given to each `RetryingOperation` the queue runs — added in this process or restored
        /// from the store — that has no `logHandler` of its own when the
        /// queue takes it, so that restored operations log where the app's do without a global.
        /// Default: `nil` (operations keep their own, or none).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.operationLogHandler = .standardError(minimumLevel: .info)
        /// ```
        public var operationLogHandler: RetryLogHandler?

        /// Shares the queue's slots fairly among groups of operations: the operations tagged
        /// with a tag that starts with this prefix (``EnqueueOptions/tags``) — `"customer:42"`,
        /// `"customer:7"` — form one group per such tag, and those with none form one more.
        /// Within each priority, due work that waits for a slot is taken from the groups in
        /// turn (round-robin), each group's in its own run order, instead of strictly first in,
        /// first out: a 4,000-job import no longer delays the work of every customer who comes
        /// after it. Default: `nil` (first in, first out within a priority).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.fairShareTagPrefix = "customer:"
        /// // … a queue with this configuration; a customer's import, in its group:
        /// let importJobs = photos.map { UploadPhoto(payload: PhotoPayload(file: $0, album: "Import")) }
        /// try queue.addOperations(importJobs, options: EnqueueOptions(tags: ["customer:42"]))
        /// ```
        ///
        /// Turns are taken as operations leave the waiting line for the `OperationQueue`,
        /// which holds a few of them ahead (four per slot, at least 64): a group that arrives
        /// behind a burst waits for those, not for the whole burst. An operation with two
        /// tags of the prefix belongs to the first in sorted order. Lanes, prerequisites,
        /// dates and run conditions apply as before: only the order in which due work gets a
        /// slot changes.
        public var fairShareTagPrefix: String?

        /// With ``fairShareTagPrefix``, the turns each group takes per round, by its tag (the
        /// group of operations with no tag of the prefix is `""`). Default: none (one turn
        /// each). A group of weight 3 gets three slots for every one of a group of weight 1
        /// while both have work waiting. Weights go from 1 to 1,000
        /// (``PersistenceError/Code/invalidOptions`` otherwise).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.fairShareTagPrefix = "customer:"
        /// configuration.fairShareWeights = ["customer:42": 3]   // a customer on a larger plan
        /// ```
        public var fairShareWeights: [String: Int] = [:]

        /// Concurrency limits by tag: at most `limit` attempts at once of the operations that
        /// carry the tag. Default: none.
        ///
        /// What a downstream that takes a few calls at a time, or one customer's share of the
        /// workers, needs: with `["api:geocoder": 2]`, two geocoder calls run at once whatever
        /// the width of the `OperationQueue`, and the other slots run other work meanwhile. An
        /// operation with several limited tags obeys each. An attempt counts from when it gets
        /// a slot until it ends; a due operation whose tag is at its limit waits without a slot,
        /// timer or retry spent (reported ``PersistentOperationInfo/State-swift.enum/queued``),
        /// and the next, in run order, starts as an attempt of the tag ends. Limits live in the
        /// configuration, not in the records: a relaunch applies the configuration it opens
        /// with. A limit below 1 is refused (``PersistenceError/Code/invalidOptions``).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.concurrencyLimits = ["api:geocoder": 2, "customer:42": 4]
        /// ```
        public var concurrencyLimits: [String: Int] = [:]

        /// Start-rate limits by tag: the attempts of the operations that carry the tag start at
        /// most ``StartRateLimit/startsPerSecond`` a second on average, and at most
        /// ``StartRateLimit/burst`` at once after a quiet spell (a token bucket). Default: none.
        ///
        /// What a downstream with a published rate ("10 requests a second per API key") needs,
        /// where ``concurrencyLimits`` bounds only how many calls are open at once: with
        /// `["api:mail": StartRateLimit(startsPerSecond: 10, burst: 5)]`, five mail attempts may
        /// start at once, and then one every 100 ms. Retries count as starts. A due operation
        /// whose tag has no start left waits without a slot or a retry spent (reported
        /// ``PersistentOperationInfo/State-swift.enum/queued``) and starts, in run order, when
        /// the bucket has one again; the other slots run other work meanwhile. An operation with
        /// several limited tags obeys each. A bounded run does not end while an operation waits
        /// only for its tag's next start. The rate is measured on the monotonic clock (not
        /// ``scheduler``), and the buckets live in memory: a relaunch starts with full buckets.
        /// A rate that is not a positive finite number, or a burst below 1, is refused
        /// (``PersistenceError/Code/invalidOptions``).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.startRateLimits = ["api:mail": StartRateLimit(startsPerSecond: 10, burst: 5)]
        /// ```
        public var startRateLimits: [String: StartRateLimit] = [:]

        /// The shortest time between two updates of a group's progress
        /// (``PersistentOperationQueue/progress(for:)``) and its
        /// ``PersistentOperationEvent/progress(_:fractionCompleted:operations:)`` event: changes
        /// within it are coalesced into one. Default: 0.25 s.
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.progressInterval = 1   // a progress bar that moves once a second
        /// ```
        public var progressInterval: TimeInterval = 0.25

        /// How long the queue remembers an ``EnqueueOptions/idempotencyKey`` after the last
        /// operation added with it left the store, so that a repeated add in that time stores
        /// nothing. Default: 300 seconds (SQS FIFO's de-duplication window); 0 remembers a key
        /// only while its operations are stored.
        ///
        /// Each remembered key costs about 150 bytes of disk and of memory for each of its
        /// operations, for the window: a queue that completes 100 keyed operations a second
        /// remembers about 30,000 of them at a time with the default. Times are read from the
        /// queue's clock (``scheduler``).
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.idempotencyWindow = 24 * 3600   // a producer may re-send for a day
        /// ```
        public var idempotencyWindow: TimeInterval = 300

        /// Whether the queue does what other processes ask through the store's inbox: after
        /// its first ``PersistentOperationQueue/restore()``, it watches the inbox (no polling)
        /// and takes in each request as it arrives. Default: `true`.
        ///
        /// `store-inspector retry-failed`, `purge` and `cancel` leave such a request when a
        /// running queue holds the store (its lock), and print the queue's answer: dead letters
        /// are re-driven, purged or cancelled without stopping the worker. A request is durable
        /// once written; the queue answers, then removes it, so a crash in between does it once
        /// more at the next launch (each action may be done twice: what is no longer where the
        /// request expects it is reported and left alone). The queue's log says what each
        /// request did.
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.takesAdministrationRequests = false   // only this process changes the store
        /// ```
        public var takesAdministrationRequests: Bool = true

        /// Whether the queue takes in the operations other processes leave in the store's
        /// inbox with ``PersistentOperationInbox`` (an app extension, a widget, an intent).
        /// Default: `true`.
        ///
        /// The queue takes the letters waiting in when ``PersistentOperationQueue/restore()``
        /// begins, before it restores, and then each as it arrives (it watches the inbox: no
        /// polling). Each letter's operations are stored as one batch, then the letter is
        /// removed, then they are scheduled: a letter is taken in once, whatever process is
        /// killed when.
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.takesOperationsFromOtherProcesses = false   // no extension adds to this store
        /// ```
        public var takesOperationsFromOtherProcesses: Bool = true

        /// Whether the queue lets the store's lock go while ``PersistentOperationQueue/applicationState``
        /// is ``PersistentOperationQueue/ApplicationState/inactive``, and takes it again when
        /// the app is active. Default: `false` (the lock is held from open to close).
        ///
        /// Turn it on for a store in an App Group container: iOS kills a suspended app that
        /// holds a file lock there (termination reason `0xdead10cc`), and an app is suspended
        /// soon after it leaves the foreground. The queue goes on working while the lock is
        /// let go (a background task, a bounded run); the lock's work — keeping a second
        /// process from opening the store — is then the app's own rule:
        ///
        /// - **Only the app opens the store.** Its extensions, widgets and intents add through
        ///   ``PersistentOperationInbox``, which takes no lock; tools read with
        ///   ``ReadOnlyPersistentStore``.
        /// - **If another process opens the store anyway** while the app is inactive, the app
        ///   finds the lock taken when it is active again. The queue then changes the store no
        ///   more (the other process may have changed it): every add and every outcome throws
        ///   or logs ``PersistenceError/Code/locked``, and the log says so. Close the queue and
        ///   open a new one once the other process has closed the store; nothing acknowledged
        ///   before is lost.
        ///
        /// ```swift
        /// var configuration = PersistentOperationQueue.Configuration()
        /// configuration.releasesStoreLockWhenInactive = true   // a store in an App Group container
        /// ```
        public var releasesStoreLockWhenInactive: Bool = false

        /// Whether the queue installs handlers for the crash signals (SIGSEGV, SIGBUS, SIGILL,
        /// SIGTRAP, SIGFPE, SIGABRT) that note, in the store, that the process crashed, so that
        /// the next launch can tell a crash from a kill. Default: `true`.
        ///
        /// The handlers are installed once per process, when the first queue opens, and pass
        /// every signal on to the handler installed before them (a crash reporter, the Swift
        /// runtime's backtracer) or to the default action, so crashes end the process, and are
        /// reported, as before. A crash reporter installed later must pass signals on too (the
        /// common ones do), or crashes look like kills. With `false`, every death with an
        /// attempt in flight while the app is active may have been a crash: an operation alone
        /// in flight when the OS kills the app counts it as a crash (a death while the app is
        /// not active still counts against nobody).
        public var installsCrashSignalHandlers: Bool = true

        /// How durable a change of the store is when its call returns. Default:
        /// ``Durability/flushed``.
        ///
        /// ```swift
        /// // Survives crashes and kills (the OS's memory kills included), not power cuts:
        /// let settings = PersistentOperationQueue.Configuration(durability: .processCrash)
        /// ```
        public var durability: Durability = .flushed

        /// Whether a removal (an operation succeeded or was cancelled) is flushed before the
        /// queue reports it, so that a power cut cannot bring the operation back. Default:
        /// `false`: a removal is written at once (a crash or kill keeps it) and flushed with the
        /// next change or within 50 ms, and after a power cut in between the operation may run
        /// again (at least once). `true` costs one flush per completed operation.
        public var strictRemovals: Bool = false

        /// The file system the store goes through (fault injection in tests).
        package var fileSystem: FileSystem = .system
        /// How the store keeps its records (tests of the earlier layout choose ``RecordStore/Engine/files``).
        package var storeEngine: RecordStore.Engine = .journal
        /// How long a removal waits at most for a flush (tests that count flushes lengthen it).
        package var storeFlushDelay: TimeInterval = JournalWriter.defaultFlushDelay

        /// Creates settings; every parameter's default is documented on its property.
        public init(
            crashLoopLimit: Int = defaultCrashLoopLimit,
            maximumRecordSize: Int = defaultMaximumRecordSize,
            scheduler: any RetryScheduler = DispatchRetryScheduler(),
            logHandler: RetryLogHandler? = nil,
            installsCrashSignalHandlers: Bool = true,
            durability: Durability = .flushed,
            strictRemovals: Bool = false
        ) {
            self.crashLoopLimit = crashLoopLimit
            self.maximumRecordSize = maximumRecordSize
            self.scheduler = scheduler
            self.logHandler = logHandler
            self.installsCrashSignalHandlers = installsCrashSignalHandlers
            self.durability = durability
            self.strictRemovals = strictRemovals
        }
    }

    /// How durable a change of the store (an add, a retry saved, a move to the failed area)
    /// is when its call returns.
    ///
    /// Measured on a 2-core Linux machine with an SSD (S1 and S1.process of the benchmarks: one
    /// add → success → removal at a time): `flushed` 4,300 to 4,800 lifecycles a second, one
    /// `fdatasync` each; `processCrash` 13,600 to 14,500, no flush at all. On Apple platforms
    /// a flush is `F_FULLFSYNC`, which costs milliseconds: batch adds with `addOperations` (one
    /// flush for the whole batch).
    public enum Durability: Sendable, Equatable {
        /// Flushed to stable storage before the call returns (the default): survives power
        /// cuts. Concurrent changes share one flush.
        case flushed
        /// Written to the file only, never flushed: survives crashes and kills, including the
        /// OS's memory kills, but a power cut may lose the last seconds of changes — what Core
        /// Data does by default.
        case processCrash
    }
}
