import Foundation
import RetryingOperation

/// One timer for many due dates: a heap of pending actions and a single scheduled call of
/// the underlying scheduler for the earliest one.
///
/// Thousands of not-yet-due operations and retry waits cost one heap entry each and one
/// timer in all, and nothing polls. Conforms to `RetryScheduler` so the retry waits of
/// persistent operations share it.
final class DueTimer: RetryScheduler, @unchecked Sendable {
    // @unchecked: all mutable state is in `state`, a `Locked`.

    private struct Item: Sendable {
        var due: Date
        var sequence: UInt64
        var action: @Sendable () -> Void
    }

    private struct State: Sendable {
        var heap = Heap<Item> { ($0.due, $0.sequence) < ($1.due, $1.sequence) }
        /// Sequences of actions in the heap that are neither run nor cancelled.
        var live = Set<UInt64>()
        /// Sequences of cancelled actions still in the heap (removed lazily).
        var cancelled = Set<UInt64>()
        var nextSequence: UInt64 = 0
        /// The due date the underlying timer is armed for, if armed.
        var armedFor: Date?
        var armed: (any ScheduledRetry)?
        var armGeneration: UInt64 = 0
    }

    /// A scheduled call; ``cancel()`` makes sure it is not made.
    final class Token: ScheduledRetry {
        let sequence: UInt64
        weak let timer: DueTimer?
        init(sequence: UInt64, timer: DueTimer) {
            self.sequence = sequence
            self.timer = timer
        }
        func cancel() {
            timer?.cancel(sequence)
        }
    }

    private let base: any RetryScheduler
    private let state = Locked(State())

    init(base: any RetryScheduler) {
        self.base = base
    }

    var now: Date { base.now }

    /// The due dates of the calls neither made nor cancelled yet, in no particular order: a
    /// test moves a manual clock once the wait it means to end is in the timer (an event such
    /// as `retryScheduled` is emitted before the operation sets its retry's timer).
    var scheduledDates: [Date] {
        state.withLock { state in state.heap.elements.filter { state.live.contains($0.sequence) }.map(\.due) }
    }

    func schedule(after delay: TimeInterval, _ action: @escaping @Sendable () -> Void) -> any ScheduledRetry {
        schedule(at: base.now.addingTimeInterval(max(0, delay)), action)
    }

    /// Calls `action` once, on any thread, at `date` (at once if it has passed).
    func schedule(at date: Date, _ action: @escaping @Sendable () -> Void) -> Token {
        let sequence = state.withLock { state in
            state.nextSequence += 1
            state.heap.insert(Item(due: date, sequence: state.nextSequence, action: action))
            state.live.insert(state.nextSequence)
            return state.nextSequence
        }
        rearm()
        return Token(sequence: sequence, timer: self)
    }

    private func cancel(_ sequence: UInt64) {
        state.withLock { state in
            if state.live.remove(sequence) != nil {
                state.cancelled.insert(sequence)
            }
        }
    }

    /// Arms the underlying timer for the earliest due date, unless it already is.
    /// The scheduler is called outside the lock.
    private func rearm() {
        let plan = state.withLock { state -> (previous: (any ScheduledRetry)?, due: Date?, generation: UInt64)? in
            while let first = state.heap.first, state.cancelled.remove(first.sequence) != nil {
                _ = state.heap.popFirst()
            }
            guard let earliest = state.heap.first?.due else {
                guard state.armed != nil else { return nil }
                state.armGeneration += 1
                state.armedFor = nil
                defer { state.armed = nil }
                return (state.armed, nil, state.armGeneration)
            }
            if let armedFor = state.armedFor, armedFor <= earliest { return nil }
            state.armGeneration += 1
            state.armedFor = earliest
            defer { state.armed = nil }
            return (state.armed, earliest, state.armGeneration)
        }
        guard let plan else { return }
        plan.previous?.cancel()
        guard let due = plan.due else { return }
        let generation = plan.generation
        // The delay is measured just before the base timer is set: a clock read earlier (a test
        // clock moved by another thread meanwhile) would set it late by the difference.
        let handle = base.schedule(after: max(0, due.timeIntervalSince(base.now))) { [weak self] in
            self?.fire(generation)
        }
        let stale = state.withLock { state -> Bool in
            guard state.armGeneration == generation, state.armedFor != nil else { return true }
            state.armed = handle
            return false
        }
        if stale { handle.cancel() }
    }

    private func fire(_ generation: UInt64) {
        let now = base.now
        let due = state.withLock { state -> [@Sendable () -> Void] in
            guard state.armGeneration == generation else { return [] }
            state.armedFor = nil
            state.armed = nil
            var due: [@Sendable () -> Void] = []
            while let first = state.heap.first, first.due <= now {
                _ = state.heap.popFirst()
                if state.cancelled.remove(first.sequence) == nil {
                    state.live.remove(first.sequence)
                    due.append(first.action)
                }
            }
            return due
        }
        for action in due {
            action()
        }
        rearm()
    }
}
