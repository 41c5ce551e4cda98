import Foundation

/// The placeholder a ``PersistentOperationQueue`` puts in its `OperationQueue` to run one
/// attempt of a stored operation: it holds one slot of the queue (honouring
/// `maxConcurrentOperationCount`, priority and suspension) from when it starts until the
/// attempt ends, so waits between attempts hold no slot.
final class AttemptSlot: Operation, @unchecked Sendable {
    // @unchecked: `phase` is a `Locked`; `recordID`, `limitedTags`, `rateLimitedTags`,
    // `onStart` and `onFinish` are set in `init` only.

    private enum Phase { case waiting, executing, finished }

    let recordID: String
    /// The tags of its operation that have a concurrency limit: the slot counts against each.
    let limitedTags: [String]
    /// The tags of its operation that have a start-rate limit: the slot reserves a start of each
    /// until it starts or leaves.
    let rateLimitedTags: [String]
    private let onStart: @Sendable (AttemptSlot) -> Void
    private let onFinish: @Sendable (AttemptSlot) -> Void
    private let phase = Locked(Phase.waiting)

    /// Creates a slot that calls `onStart` when the `OperationQueue` starts it, and
    /// `onFinish` once when it finishes — before the queue learns it has, so that a slot
    /// added by `onFinish` keeps the queue from looking empty in between.
    init(
        recordID: String, priority: Operation.QueuePriority, limitedTags: [String] = [], rateLimitedTags: [String] = [],
        onStart: @escaping @Sendable (AttemptSlot) -> Void, onFinish: @escaping @Sendable (AttemptSlot) -> Void
    ) {
        self.recordID = recordID
        self.limitedTags = limitedTags
        self.rateLimitedTags = rateLimitedTags
        self.onStart = onStart
        self.onFinish = onFinish
        super.init()
        queuePriority = priority
        name = "PersistentOperationQueue attempt \(recordID)"
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { phase.withLock { $0 == .executing } }
    override var isFinished: Bool { phase.withLock { $0 == .finished } }

    override func start() {
        guard phase.withLock({ $0 == .waiting }) else { return }
        if isCancelled {
            release()
            return
        }
        willChangeValue(forKey: "isExecuting")
        phase.withLock { $0 = .executing }
        didChangeValue(forKey: "isExecuting")
        onStart(self)
    }

    /// Frees the slot; later calls do nothing.
    func release() {
        let previous = phase.withLock { phase -> Phase in
            defer { phase = .finished }
            return phase
        }
        guard previous != .finished else { return }
        onFinish(self)
        if previous == .executing { willChangeValue(forKey: "isExecuting") }
        willChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isFinished")
        if previous == .executing { didChangeValue(forKey: "isExecuting") }
    }
}
