import Foundation
@testable import PersistentOperations

/// What each test's operations did, keyed by the test's journal name (tests run in parallel).
enum Journal {
    private static let entries = Locked<[String: [String]]>([:])

    static func record(_ journal: String, _ line: String) {
        entries.withLock { $0[journal, default: []].append(line) }
    }

    static func lines(_ journal: String) -> [String] {
        entries.withLock { $0[journal] ?? [] }
    }
}

/// How each attempt of a ``ScriptedUpload`` ends, by attempt number (the last step repeats).
enum UploadStep: String, Codable, Sendable {
    case succeed
    /// Counted retry after the payload's delay.
    case retry
    /// Uncounted retry after the payload's delay.
    case retryUncounted
    /// Non-retriable failure.
    case fail
    /// Ends only when cancelled (cancelBaseOperation ends it).
    case hang
}

struct UploadPayload: Codable, Sendable, Equatable {
    var name: String
    var journal: String
    var steps: [UploadStep] = [.succeed]
    var retryDelay: TimeInterval = 10
    /// When set, the operation's retry policy has this attempt timeout (and retries after
    /// `retryDelay`, at most five times).
    var attemptTimeout: TimeInterval?
}

struct UploadFailed: Error, CustomStringConvertible {
    var description: String { "the server refused the upload" }
}

/// An asynchronous retrying operation that follows its payload's script and journals each
/// attempt as "NAME#ATTEMPT retry=BOOL retries=N". Each attempt ends on a thread of its own: the
/// queue saves the outcome on the thread that reports it (writes, flushes, and the holds some
/// tests put in them), which must not be one of the few threads of the global queue (on
/// Linux, those of Swift concurrency's pool too, which run the tests).
final class ScriptedUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.scripted-upload"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
        if let timeout = payload.attemptTimeout {
            retryPolicy = RetryPolicy(retryLimit: .maximum(5), backoff: .constant(payload.retryDelay), jitter: .none, attemptTimeout: timeout)
        }
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        Journal.record(payload.journal, "\(payload.name)#\(attempt) retry=\(isRetry) retries=\(numberOfRetries ?? -1)")
        let step = payload.steps[min(attempt - 1, payload.steps.count - 1)]
        Thread.detachNewThread { [self] in
            switch step {
            case .succeed: baseOperationEnded()
            case .retry: baseOperationEnded(needsRetryIn: payload.retryDelay, countsTowardRetryLimit: true)
            case .retryUncounted: baseOperationEnded(needsRetryIn: payload.retryDelay, countsTowardRetryLimit: false)
            case .fail: baseOperationEnded(failingWith: UploadFailed())
            case .hang: break
            }
        }
    }

    override func cancelBaseOperation() {
        baseOperationEnded(failingWith: CancellationError())
    }
}

/// A plain synchronous `Operation` (not a `RetryingOperation`) that journals its run.
final class PlainNote: Operation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.plain-note"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    override func main() {
        guard !isCancelled else { return }
        Journal.record(payload.journal, "\(payload.name) ran")
    }
}

/// A type registered under an identifier whose payload has a different shape.
final class OtherShape: Operation, PersistentOperation, @unchecked Sendable {
    struct Payload: Codable, Sendable { var count: Int }
    static let persistenceIdentifier = ScriptedUpload.persistenceIdentifier
    let payload: Payload
    init(payload: Payload) { self.payload = payload }
}

/// A queue over a fresh temporary store, with a manual clock and an event log.
struct QueueFixture {
    let directory: TemporaryDirectory
    let clock = ManualRetryScheduler()
    let journal: String
    let events = Locked<[PersistentOperationEvent]>([])
    /// Every event with its subject (``PersistentOperationQueue/eventHandlerWithSubject`` is set
    /// on every fixture's queue, so that every test reads subjects as events are emitted).
    let subjects = Locked<[(event: PersistentOperationEvent, subject: PersistentOperationEvent.Subject?)]>([])
    let queue: PersistentOperationQueue

    /// `underlyingQueue`: the dispatch queue the operation queue runs its operations on; by
    /// default the global queue.
    init(maxConcurrent: Int = 1, suspended: Bool = false, directory: TemporaryDirectory? = nil,
         crashLoopLimit: Int = 3, fileSystem: FileSystem = .system, journal: String = UUID().uuidString,
         witness: Bool = true, underlyingQueue: DispatchQueue? = nil) throws {
        self.journal = journal
        self.directory = try directory ?? TemporaryDirectory()
        queue = try Self.open(self.directory, clock: clock, maxConcurrent: maxConcurrent, suspended: suspended,
                              crashLoopLimit: crashLoopLimit, fileSystem: fileSystem, events: events, witness: witness,
                              underlyingQueue: underlyingQueue, subjects: subjects)
    }

    static func open(
        _ directory: TemporaryDirectory, clock: ManualRetryScheduler, maxConcurrent: Int = 1, suspended: Bool = false,
        crashLoopLimit: Int = 3, fileSystem: FileSystem = .system, events: Locked<[PersistentOperationEvent]>,
        witness: Bool = true, underlyingQueue: DispatchQueue? = nil,
        subjects: Locked<[(event: PersistentOperationEvent, subject: PersistentOperationEvent.Subject?)]>? = nil
    ) throws -> PersistentOperationQueue {
        let operationQueue = OperationQueue()
        operationQueue.maxConcurrentOperationCount = maxConcurrent
        operationQueue.underlyingQueue = underlyingQueue
        operationQueue.isSuspended = suspended
        var configuration = PersistentOperationQueue.Configuration(crashLoopLimit: crashLoopLimit, scheduler: clock)
        configuration.fileSystem = fileSystem
        configuration.installsCrashSignalHandlers = witness
        let queue = try PersistentOperationQueue(directory: directory.store, operationQueue: operationQueue, configuration: configuration)
        queue.eventHandler = { event in events.withLock { $0.append(event) } }
        if let subjects {
            queue.eventHandlerWithSubject = { event, subject in subjects.withLock { $0.append((event, subject)) } }
        }
        queue.register(ScriptedUpload.self)
        queue.register(PlainNote.self)
        queue.register(SyncScriptedUpload.self)
        return queue
    }

    /// What an earlier launch left in `directory`: `body` adds to a suspended queue over it,
    /// which is then closed (as if the app had ended before anything ran).
    @discardableResult
    static func earlierLaunch<T>(
        _ directory: TemporaryDirectory, clock: ManualRetryScheduler, events: Locked<[PersistentOperationEvent]>,
        _ body: (PersistentOperationQueue) throws -> T
    ) throws -> T {
        let queue = try open(directory, clock: clock, suspended: true, events: events)
        defer { queue.close() }
        return try body(queue)
    }

    func upload(_ name: String, _ steps: [UploadStep] = [.succeed], retryDelay: TimeInterval = 10) -> ScriptedUpload {
        ScriptedUpload(payload: UploadPayload(name: name, journal: journal, steps: steps, retryDelay: retryDelay))
    }

    func syncUpload(_ name: String, _ steps: [UploadStep] = [.succeed], retryDelay: TimeInterval = 10) -> SyncScriptedUpload {
        SyncScriptedUpload(payload: UploadPayload(name: name, journal: journal, steps: steps, retryDelay: retryDelay))
    }

    func note(_ name: String) -> PlainNote {
        PlainNote(payload: UploadPayload(name: name, journal: journal))
    }

    var lines: [String] { Journal.lines(journal) }

    /// Every event delivered so far.
    func deliveredEvents() -> [PersistentOperationEvent] {
        queue.hub.flush()
        return events.withLock { $0 }
    }

    /// The pending records on disk, read by an independent read-only store.
    func pendingRecords() throws -> [OperationRecord] {
        try RecordStore(directory: directory.store, access: .readOnly).loadPending().records
    }

    func failedRecords() throws -> [OperationRecord] {
        try RecordStore(directory: directory.store, access: .readOnly).loadFailed().records
    }
}

extension RetryingOperation {
    /// Whether the operation finished cancelled.
    var finishedCancelled: Bool {
        if case .cancelled? = outcome { return true }
        return false
    }
}

/// A synchronous retrying operation that follows its payload's script like ``ScriptedUpload``
/// (each attempt ends before `startBaseOperation` returns).
final class SyncScriptedUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "test.sync-scripted-upload"
    let payload: UploadPayload

    init(payload: UploadPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        let attempt = numberOfAttempts
        Journal.record(payload.journal, "\(payload.name)#\(attempt) retry=\(isRetry) retries=\(numberOfRetries ?? -1)")
        switch payload.steps[min(attempt - 1, payload.steps.count - 1)] {
        case .succeed: baseOperationEnded()
        case .retry: baseOperationEnded(needsRetryIn: payload.retryDelay, countsTowardRetryLimit: true)
        case .retryUncounted: baseOperationEnded(needsRetryIn: payload.retryDelay, countsTowardRetryLimit: false)
        case .fail, .hang: baseOperationEnded(failingWith: UploadFailed())
        }
    }
}

extension RecordStore.Configuration {
    /// The earlier layout of one file per record: the suites of that engine (the migration's
    /// source) pin it.
    static let files = Self(engine: .files)
}
