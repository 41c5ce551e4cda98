import Foundation

/// A ``RetryScheduler`` whose time moves only when you say so: test retry logic without
/// waiting for real delays.
///
/// Give it to the operations under test, then move time forward with ``advance(by:)`` or
/// ``advanceToNextRetry()``. Due retries run on the calling thread, in deadline order,
/// before those methods return. When operations run on an `OperationQueue`, use
/// ``waitForScheduledRetries(count:timeout:)`` to wait (without polling) until they have
/// scheduled their retries.
///
/// ```swift
/// @Test func uploadRetriesThreeTimesThenGivesUp() {
///     let clock = ManualRetryScheduler()
///     let upload = UploadOperation(file: file)
///     upload.retryScheduler = clock
///     upload.retryPolicy = RetryPolicy(retryLimit: .maximum(3), backoff: .constant(10), jitter: .none)
///
///     upload.start()                       // attempt 1 fails, retry scheduled in 10 s
///     #expect(clock.pendingDelays == [10])
///     clock.advance(by: 30)                // attempts 2, 3 and 4 run now
///     #expect(upload.outcome?.error != nil)
/// }
/// ```
public final class ManualRetryScheduler: RetryScheduler, @unchecked Sendable {
    // @unchecked: all mutable state is in `state` (a `Locked`); `scheduledCondition` only
    // signals changes of it.

    private struct Entry: Sendable {
        let id: UInt64
        let deadline: Date
        let action: @Sendable () -> Void
    }

    private struct State: Sendable {
        var now: Date
        var entries: [Entry] = []
        var nextID: UInt64 = 0
        var totalScheduled = 0
        var waiters: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        /// Waits whose task was cancelled before they were registered.
        var cancelledWaiters: Set<UInt64> = []

        /// Removes and returns the waiters whose condition now holds.
        mutating func takeSatisfiedWaiters() -> [CheckedContinuation<Void, Never>] {
            let snapshot = self
            let satisfied = waiters.filter { $0.isSatisfied(by: snapshot) }
            waiters.removeAll { $0.isSatisfied(by: snapshot) }
            return satisfied.map(\.continuation)
        }
    }

    private struct Waiter: Sendable {
        let id: UInt64
        /// Pending retries to wait for, or `nil`.
        let pending: Int?
        /// Retries ever scheduled to wait for, or `nil`.
        let total: Int?
        let continuation: CheckedContinuation<Void, Never>

        func isSatisfied(by state: State) -> Bool {
            if let pending, state.entries.count < pending { return false }
            if let total, state.totalScheduled < total { return false }
            return true
        }
    }

    private let state: Locked<State>
    private let scheduledCondition = NSCondition()

    /// Creates a scheduler whose clock reads `now`.
    public init(now: Date = Date(timeIntervalSinceReferenceDate: 0)) {
        state = Locked(State(now: now))
    }

    /// The scheduler's current time.
    public var now: Date {
        state.withLock { $0.now }
    }

    /// The number of retries scheduled and neither run nor cancelled.
    public var pendingCount: Int {
        state.withLock { $0.entries.count }
    }

    /// The delays, from now, of the pending retries, soonest first.
    public var pendingDelays: [TimeInterval] {
        state.withLock { state in
            state.entries.map { $0.deadline.timeIntervalSince(state.now) }.sorted()
        }
    }

    /// The number of retries ever scheduled, cancelled ones included.
    public var totalScheduledCount: Int {
        state.withLock { $0.totalScheduled }
    }

    public func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry {
        let (id, satisfied) = state.withLock { state in
            state.nextID += 1
            let seconds = delay.isFinite ? max(delay, 0) : (delay > 0 ? DispatchRetryScheduler.longestDelay : 0)
            state.entries.append(Entry(id: state.nextID, deadline: state.now.addingTimeInterval(seconds), action: action))
            state.totalScheduled += 1
            return (state.nextID, state.takeSatisfiedWaiters())
        }
        for waiter in satisfied { waiter.resume() }
        scheduledCondition.lock()
        scheduledCondition.broadcast()
        scheduledCondition.unlock()
        return ManualScheduledRetry(scheduler: self, id: id)
    }

    /// Moves the clock forward by `interval` seconds, running every retry that falls due,
    /// in deadline order — including retries scheduled by those retries, when they fall
    /// due within the interval.
    ///
    /// ```swift
    /// clock.advance(by: 5)
    /// ```
    public func advance(by interval: TimeInterval) {
        let target = state.withLock { $0.now.addingTimeInterval(max(interval, 0)) }
        while let entry = takeNextEntry(dueBy: target) {
            entry.action()
        }
        state.withLock { state in
            if state.now < target { state.now = target }
        }
    }

    /// Moves the clock to the earliest pending retry and runs it.
    ///
    /// - Returns: `false` when no retry was pending.
    @discardableResult
    public func advanceToNextRetry() -> Bool {
        guard let entry = takeNextEntry(dueBy: nil) else { return false }
        entry.action()
        return true
    }

    /// Suspends, without blocking a thread, until at least `count` retries are pending, or
    /// until its task is cancelled (then it returns whether or not they are).
    ///
    /// Bound the wait with your test framework's time limit: a test that reaches it is
    /// cancelled, and so is the wait.
    ///
    /// ```swift
    /// queue.addOperation(upload)
    /// await clock.waitForScheduledRetries(count: 1)
    /// clock.advance(by: 10)
    /// ```
    public func waitForScheduledRetries(count: Int) async {
        await wait(pending: count, total: nil)
    }

    /// Suspends, without blocking a thread, until at least `count` retries have ever been
    /// scheduled (cancelled ones included) — for waits that replace a pending retry, such
    /// as ``RetryingOperation/retry(in:)`` — or until its task is cancelled.
    ///
    /// ```swift
    /// operation.retry(in: 5)                                   // replaces the 1-hour wait
    /// await clock.waitForTotalScheduledRetries(count: 2)
    /// #expect(clock.pendingDelays == [5])
    /// ```
    public func waitForTotalScheduledRetries(count: Int) async {
        await wait(pending: nil, total: count)
    }

    private func wait(pending: Int?, total: Int?) async {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waiter = Waiter(id: id, pending: pending, total: total, continuation: continuation)
                let resumesNow = state.withLock { state -> Bool in
                    if waiter.isSatisfied(by: state) || state.cancelledWaiters.contains(id) { return true }
                    state.waiters.append(waiter)
                    return false
                }
                if resumesNow { continuation.resume() }
            }
        } onCancel: {
            // A cancelled wait returns: a test's time limit ends it instead of leaving it
            // suspended for good.
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else {
                    state.cancelledWaiters.insert(id)   // not registered yet
                    return nil
                }
                return state.waiters.remove(at: index).continuation
            }
            continuation?.resume()
        }
        state.withLock { _ = $0.cancelledWaiters.remove(id) }
    }

    /// Blocks the calling thread, without polling, until at least `count` retries are
    /// pending. Prefer the `async` variant in `async` tests.
    ///
    /// - Returns: `false` if `timeout` seconds of real time passed first.
    @discardableResult
    public func waitForScheduledRetries(count: Int, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        scheduledCondition.lock()
        defer { scheduledCondition.unlock() }
        while pendingCount < count {
            if !scheduledCondition.wait(until: deadline) {
                return pendingCount >= count
            }
        }
        return true
    }

    /// Removes and returns the earliest entry due by `limit` (any entry when `nil`),
    /// moving the clock to its deadline.
    private func takeNextEntry(dueBy limit: Date?) -> Entry? {
        state.withLock { state in
            guard let index = state.entries.indices.min(by: {
                (state.entries[$0].deadline, state.entries[$0].id) < (state.entries[$1].deadline, state.entries[$1].id)
            }) else { return nil }
            let entry = state.entries[index]
            if let limit, entry.deadline > limit { return nil }
            state.entries.remove(at: index)
            if state.now < entry.deadline { state.now = entry.deadline }
            return entry
        }
    }

    fileprivate func cancelEntry(id: UInt64) {
        state.withLock { state in
            state.entries.removeAll { $0.id == id }
        }
    }
}

private struct ManualScheduledRetry: ScheduledRetry {
    let scheduler: ManualRetryScheduler
    let id: UInt64

    func cancel() {
        scheduler.cancelEntry(id: id)
    }
}
