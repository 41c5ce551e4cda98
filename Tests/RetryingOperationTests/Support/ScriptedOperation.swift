import Foundation
import RetryingOperation

struct TestError: Error, Equatable, CustomStringConvertible {
    let name: String
    init(_ name: String) { self.name = name }
    var description: String { "TestError(\(name))" }
}

/// What one attempt of a ``ScriptedOperation`` does.
enum Step: Sendable {
    case succeed
    case fail(TestError)
    case retriableError(TestError)
    case retryIn(TimeInterval)
    case retryWithBudget(TimeInterval, counted: Bool)
    case waitForManualRetry
    case waitForHelpers(count: Int, counted: Bool)
    /// Runs until cancelled; then ends with a failure.
    case runUntilCancelled
    /// A synchronous attempt that forgets to call `baseOperationEnded`.
    case forgetToEnd
    /// Calls `baseOperationEnded()` twice.
    case endTwice
}

/// A helper that records its setup/teardown calls in the operation's event log.
struct RecordingRetryHelper: RetryHelper {
    let log: EventLog
    let index: Int
    let onSetup: @Sendable () -> Void
    private(set) var isSetUp = false

    init(log: EventLog, index: Int, onSetup: @escaping @Sendable () -> Void = {}) {
        self.log = log
        self.index = index
        self.onSetup = onSetup
    }

    mutating func setup() {
        isSetUp = true
        log.append("setup\(index)")
        onSetup()
    }

    mutating func teardown() {
        log.append(isSetUp ? "teardown\(index)" : "teardown\(index) without setup")
        isSetUp = false
    }
}

/// A thread-safe, ordered list of events.
final class EventLog: Sendable {
    private let events = LockedBox<[String]>([])
    func append(_ event: String) { events.withLock { $0.append(event) } }
    var all: [String] { events.withLock { $0 } }
    func count(of event: String) -> Int { all.filter { $0 == event }.count }
}

/// A tiny lock box for tests (the library's own is `package`, not visible here).
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock(); defer { lock.unlock() }
        return try body(&value)
    }
}

/// A `RetryingOperation` that follows a script: attempt *n* performs `steps[n - 1]` (the last
/// step repeats). Synchronous or asynchronous.
final class ScriptedOperation: RetryingOperation, @unchecked Sendable {
    // @unchecked: mutable state is in `LockedBox`es and semaphores.
    let asynchronous: Bool
    let steps: [Step]
    let events = EventLog()
    /// Signalled when an attempt has started (after its start is recorded).
    let attemptStarted = DispatchSemaphore(value: 0)
    /// Signalled when the last helper of a `.waitForHelpers` step has been set up.
    let helpersSetUp = DispatchSemaphore(value: 0)
    private let cancelSignal = DispatchSemaphore(value: 0)
    private let attemptIndex = LockedBox(0)

    init(asynchronous: Bool, steps: [Step], scheduler: (any RetryScheduler)? = nil) {
        self.asynchronous = asynchronous
        self.steps = steps
        super.init()
        if let scheduler { retryScheduler = scheduler }
    }

    override var isAsynchronous: Bool { asynchronous }

    var startCount: Int { events.all.filter { $0.hasPrefix("start") }.count }

    override func startBaseOperation(isRetry: Bool) {
        let index = attemptIndex.withLock { index -> Int in
            defer { index += 1 }
            return index
        }
        events.append("start(isRetry: \(isRetry), retries: \(numberOfRetries.map(String.init) ?? "nil"))")
        let step = steps[min(index, steps.count - 1)]
        if asynchronous, case .runUntilCancelled = step {
            // A blocking attempt gets a thread of its own: blocking pool threads starves them.
            Thread.detachNewThread { self.perform(step) }
        } else if asynchronous {
            DispatchQueue.global().async { self.perform(step) }
        } else {
            perform(step)
        }
    }

    override func cancelBaseOperation() {
        events.append("cancelBaseOperation")
        cancelSignal.signal()
    }

    private func makeHelper(_ helperIndex: Int, isLast: Bool) -> RecordingRetryHelper {
        let signal = helpersSetUp
        let onSetup: @Sendable () -> Void = { if isLast { signal.signal() } }
        return RecordingRetryHelper(log: events, index: helperIndex, onSetup: onSetup)
    }

    private func perform(_ step: Step) {
        switch step {
        case .succeed:
            attemptStarted.signal()
            baseOperationEnded()
        case .fail(let error):
            attemptStarted.signal()
            baseOperationEnded(failingWith: error)
        case .retriableError(let error):
            attemptStarted.signal()
            baseOperationEnded(withRetriableError: error)
        case .retryIn(let delay):
            attemptStarted.signal()
            baseOperationEnded(needsRetryIn: delay)
        case .retryWithBudget(let delay, let counted):
            attemptStarted.signal()
            baseOperationEnded(needsRetryIn: delay, countsTowardRetryLimit: counted)
        case .waitForManualRetry:
            attemptStarted.signal()
            baseOperationEnded(retryHelpers: [])
        case .waitForHelpers(let count, let counted):
            attemptStarted.signal()
            var helpers: [RetryHelper] = []
            for helperIndex in 0..<count {
                helpers.append(makeHelper(helperIndex, isLast: helperIndex == count - 1))
            }
            baseOperationEnded(retryHelpers: helpers, countsTowardRetryLimit: counted)
        case .runUntilCancelled:
            attemptStarted.signal()
            cancelSignal.wait()
            baseOperationEnded(failingWith: TestError("stopped by cancel"))
        case .forgetToEnd:
            attemptStarted.signal()
        case .endTwice:
            attemptStarted.signal()
            baseOperationEnded()
            baseOperationEnded()
        }
    }
}

/// Collects log messages; tests can wait for one to arrive.
final class LogCapture: @unchecked Sendable {
    // @unchecked: `messages` is only touched while `condition` is locked.
    private let condition = NSCondition()
    private var messages: [RetryLogHandler.Message] = []

    var handler: RetryLogHandler {
        RetryLogHandler(minimumLevel: .debug) { message in
            self.condition.lock()
            self.messages.append(message)
            self.condition.broadcast()
            self.condition.unlock()
        }
    }

    var all: [RetryLogHandler.Message] {
        condition.lock(); defer { condition.unlock() }
        return messages
    }

    /// Waits (without polling) until a message containing `text` has been logged.
    func waitForMessage(containing text: String, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock(); defer { condition.unlock() }
        while !messages.contains(where: { $0.text.contains(text) }) {
            if !condition.wait(until: deadline) { return messages.contains { $0.text.contains(text) } }
        }
        return true
    }

    func texts(at level: RetryLogHandler.Level) -> [String] {
        all.filter { $0.level == level }.map(\.text)
    }
}

extension DispatchSemaphore {
    /// Waits up to `seconds`; `true` if signalled.
    func wait(seconds: Double) -> Bool {
        wait(timeout: .now() + seconds) == .success
    }
}

/// Suspends until every operation now in `queue` has finished, without blocking a thread.
func drain(_ queue: OperationQueue) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        queue.addBarrierBlock { continuation.resume() }
    }
}

/// Runs `body` on a new thread of its own (never a pool thread) and suspends until it returns.
func onDedicatedThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

func makeQueue(maxConcurrent: Int = OperationQueue.defaultMaxConcurrentOperationCount) -> OperationQueue {
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = maxConcurrent
    return queue
}

/// Starts `operation` by hand on a new thread: a synchronous operation started by hand keeps
/// its thread until it finishes, which must not be a thread the test needs.
func startOnItsOwnThread(_ operation: Operation) {
    Thread.detachNewThread { operation.start() }
}
