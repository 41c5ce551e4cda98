import Foundation

// Pauses: the queue, or the operations of a tag, hold their due work until a date — what a
// downstream's "Retry-After" asks of every caller at once. A pause is a condition that does not
// hold until its date: a due entry it holds is parked under the pause's key (see `+Conditions`)
// with no slot, timer or poll, and spends no retry; when the pause ends (its date, or
// `resumeFromPause`), the entries parked under it are looked at again. Attempts already running
// go on. Pauses live in memory only: a relaunch starts with none.

/// A pause in force on a ``PersistentOperationQueue``: see
/// ``PersistentOperationQueue/pause(until:taggedWith:)``.
public struct PersistentQueuePause: Sendable, Hashable {
    /// The tag whose operations it holds; `nil` for the whole queue.
    public var tag: String?
    /// When it ends.
    public var until: Date
}

/// A pause, as the queue keeps it: its end, and the timer that ends it.
struct ActivePause: Sendable {
    var tag: String?
    var until: Date
    var token: DueTimer.Token
}

extension PersistentOperationQueue {
    /// The key under which the entries a pause holds are parked.
    static func pauseKey(forTag tag: String?) -> String {
        tag.map { "\u{1}pause:\($0)" } ?? "\u{1}pause"
    }

    /// Under the lock: the key of a pause that holds `entry`, if any: the whole queue's first,
    /// then its tags' in order.
    func pauseKey(holding entry: Entry, in state: State) -> String? {
        let all = Self.pauseKey(forTag: nil)
        if state.pauses[all] != nil { return all }
        for tag in entry.record.tags {
            let key = Self.pauseKey(forTag: tag)
            if state.pauses[key] != nil { return key }
        }
        return nil
    }

    /// Holds the due work of the whole queue, or of the operations tagged `tag`, until `date`:
    /// what a downstream's "Retry-After" asks of every caller at once, not only of the attempt
    /// that heard it.
    ///
    /// While a pause holds them, due operations wait without a slot and without spending a
    /// retry (``PersistentOperationInfo/State-swift.enum/waitingForConditions``); a retry that
    /// comes due waits too. Attempts already running go on. When the date comes (or
    /// ``resumeFromPause(taggedWith:)`` is called), what waited starts in run order. A second
    /// pause of the same scope keeps the later of the two dates; a pause whose date has passed
    /// does nothing. Pauses are not saved: a relaunch starts with none.
    ///
    /// An attempt that hears "429 Too Many Requests, Retry-After: 30" pauses everyone who calls
    /// that service, then retries without spending its retry budget (the pause holds its retry
    /// too):
    ///
    /// ```swift
    /// final class Upload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    ///     static let persistenceIdentifier = "com.example.upload"
    ///     let payload: URL
    ///     weak var queue: PersistentOperationQueue?
    ///
    ///     init(payload: URL) {
    ///         self.payload = payload
    ///         super.init()
    ///     }
    ///
    ///     override var isAsynchronous: Bool { true }
    ///
    ///     override func startBaseOperation(isRetry: Bool) {
    ///         send(payload) { status, retryAfter in
    ///             if status == 429 {
    ///                 self.queue?.pause(until: Date().addingTimeInterval(retryAfter), taggedWith: "api")
    ///                 self.baseOperationEnded(needsRetryIn: 0, countsTowardRetryLimit: false)
    ///             } else {
    ///                 self.baseOperationEnded()
    ///             }
    ///         }
    ///     }
    ///
    ///     func send(_ file: URL, completion: @escaping @Sendable (Int, TimeInterval) -> Void) {
    ///         completion(200, 0)
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - date: When the pause ends.
    ///   - tag: The tag whose operations it holds (``EnqueueOptions/tags``); `nil` (the
    ///     default) for every operation of the queue.
    public func pause(until date: Date, taggedWith tag: String? = nil) {
        let key = Self.pauseKey(forTag: tag)
        guard date > timer.now else { return }
        // Set up outside the lock: a timer whose date has passed fires at once.
        let token = timer.schedule(at: date) { [weak self] in self?.endPause(key, ifUntil: date) }
        let replaced = state.withLock { state -> DueTimer.Token?? in
            if let current = state.pauses[key], current.until >= date { return .none }
            defer { state.pauses[key] = ActivePause(tag: tag, until: date, token: token) }
            return .some(state.pauses[key]?.token)
        }
        guard let replaced else {
            token.cancel()   // a later pause of the same scope is in force
            return
        }
        replaced?.cancel()
        // The timer may have fired before the pause was in place (it fires only once `date`
        // has come): end it now.
        if date <= timer.now { endPause(key, ifUntil: date) }
        log(.info, "paused \(tag.map { "the operations tagged \"\($0)\"" } ?? "the queue") until \(date)") {
            ["pause_until": "\(date.timeIntervalSince1970)"].merging(tag.map { ["tag": $0] } ?? [:]) { own, _ in own }
        }
    }

    /// Holds the due work of the whole queue, or of the operations tagged `tag`, for
    /// `seconds`: ``pause(until:taggedWith:)`` with a date that many seconds from now.
    ///
    /// ```swift
    /// queue.pause(for: 30, taggedWith: "api")   // Retry-After: 30
    /// ```
    public func pause(for seconds: TimeInterval, taggedWith tag: String? = nil) {
        guard seconds > 0, seconds.isFinite else { return }
        pause(until: timer.now.addingTimeInterval(seconds), taggedWith: tag)
    }

    /// Ends a pause now: what it held starts in run order (unless another pause, a run
    /// condition or ``isSuspended`` holds it). Does nothing when no such pause is in force.
    ///
    /// ```swift
    /// queue.resumeFromPause(taggedWith: "api")   // the service is back early
    /// ```
    ///
    /// - Parameter tag: The tag the pause was made for; `nil` for the whole queue's.
    public func resumeFromPause(taggedWith tag: String? = nil) {
        endPause(Self.pauseKey(forTag: tag), ifUntil: nil)
    }

    /// The pauses in force, the whole queue's first, then by tag.
    ///
    /// ```swift
    /// for pause in queue.pauses { print("\(pause.tag ?? "everything") waits until \(pause.until)") }
    /// ```
    public var pauses: [PersistentQueuePause] {
        state.withLock { state in
            state.pauses.values.map { PersistentQueuePause(tag: $0.tag, until: $0.until) }
        }
        .sorted { ($0.tag == nil ? 0 : 1, $0.tag ?? "") < ($1.tag == nil ? 0 : 1, $1.tag ?? "") }
    }

    /// Ends the pause under `key` — when `date` is given, only if it is still the pause that
    /// ends then (a later pause replaced it) — and releases what it held.
    private func endPause(_ key: String, ifUntil date: Date?) {
        let window = slotWindow()
        let ended = state.withLock { state -> (pause: ActivePause, slots: [AttemptSlot])? in
            guard let pause = state.pauses[key], date == nil || pause.until == date else { return nil }
            state.pauses.removeValue(forKey: key)
            return (pause, releaseParked(under: key, in: &state, window: window))
        }
        guard let ended else { return }
        if date == nil { ended.pause.token.cancel() }
        log(.info, "the pause of \(ended.pause.tag.map { "the operations tagged \"\($0)\"" } ?? "the queue") ended")
        for slot in ended.slots {
            operationQueue.addOperation(slot)
        }
        noteRunProgress()
    }
}
