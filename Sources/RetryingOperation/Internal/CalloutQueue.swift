import Foundation

/// Runs the jobs of one operation one at a time, in order, on whichever thread submits
/// a job while no other job is running.
///
/// Every piece of user code a ``RetryingOperation`` calls (`startBaseOperation`,
/// `cancelBaseOperation`, retry helpers' `setup`/`teardown`) and every KVO announcement
/// it posts go through its `CalloutQueue`. That serialises them without a thread hop:
/// the common path (start an attempt, end it, finish) runs inline, and a job submitted
/// while another runs — a timer firing during `startBaseOperation`, for instance — is
/// run right after it by the thread that is already draining.
package final class CalloutQueue: @unchecked Sendable {
    // @unchecked: `isDraining`, `nextJob` and `laterJobs` are only touched while `lock` is
    // held; jobs run outside the lock, one at a time.
    private let lock = NSLock()
    private var isDraining = false
    // The pending jobs, oldest first: `nextJob`, then `laterJobs`. One pending job — the
    // common case, an attempt that ends inside `startBaseOperation` — needs no array.
    private var nextJob: Job?
    private var laterJobs: [Job] = []

    /// A job in a concrete wrapper: a bare closure stored in an `Optional` or an `Array`
    /// would be re-wrapped in a heap-allocated thunk every time.
    private struct Job {
        let body: () -> Void
    }

    package init() {}

    /// Runs `job` now if the queue is idle (and then any job submitted meanwhile),
    /// otherwise appends it behind the running job and returns at once.
    package func run(_ job: @escaping () -> Void) {
        lock.lock()
        if isDraining {
            if nextJob == nil && laterJobs.isEmpty {
                nextJob = Job(body: job)
            } else {
                laterJobs.append(Job(body: job))
            }
            lock.unlock()
            return
        }
        isDraining = true
        lock.unlock()

        job()
        while let current = takeNextJobOrStopDraining() {
            current.body()
        }
    }

    /// The oldest pending job; when there is none, the queue stops draining.
    private func takeNextJobOrStopDraining() -> Job? {
        lock.lock()
        defer { lock.unlock() }
        if let job = nextJob {
            nextJob = nil
            return job
        }
        if !laterJobs.isEmpty {
            return laterJobs.removeFirst()
        }
        isDraining = false
        return nil
    }
}

/// Carries a value that is not `Sendable` across a thread hop whose sender gives it up.
///
/// Used where the library takes ownership of a caller's values (retry helpers handed to
/// ``RetryingOperation/retry(withHelpers:)``) and touches them only on the operation's
/// ``CalloutQueue`` afterwards.
package struct HandedOver<Value>: @unchecked Sendable {
    // @unchecked: the sender never touches `value` again after handing it over.
    package let value: Value
    package init(_ value: Value) { self.value = value }
}
