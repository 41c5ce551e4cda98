import Foundation

/// Delivers events in order, on a private serial queue, to a handler and to any number of
/// `AsyncStream`s. Never runs a handler while a lock is held.
/// What reads the subject of an event's operation (the queue).
protocol EventSubjectSource: AnyObject, Sendable {
    func subject(for event: PersistentOperationEvent) -> PersistentOperationEvent.Subject?
}

final class EventHub: Sendable {
    private struct Subscribers {
        var handler: (@Sendable (PersistentOperationEvent) -> Void)?
        /// The handler that also gets the subject of each event, read when it is emitted.
        var subjectHandler: (@Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)?
        /// The observers added by `PersistentOperationQueue.addEventObserver(_:)`, called
        /// after the handlers, in the order they were added.
        var observers: [(key: UInt64, observer: @Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)] = []
        var streams: [UInt64: AsyncStream<PersistentOperationEvent>.Continuation] = [:]
        /// The queue's own observers (bounded runs), called before the handler.
        var monitors: [ObjectIdentifier: @Sendable (PersistentOperationEvent) -> Void] = [:]
        /// Monitors whose registration waits on the delivery queue (see ``addMonitor(_:_:)``).
        var monitorsToRegister = 0
        var nextKey: UInt64 = 0
    }

    private let delivery = DispatchQueue(label: "PersistentOperationQueue.events")
    private let subscribers = Locked(Subscribers())

    var handler: (@Sendable (PersistentOperationEvent) -> Void)? {
        get { subscribers.withLock { $0.handler } }
        set { subscribers.withLock { $0.handler = newValue } }
    }

    var subjectHandler: (@Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void)? {
        get { subscribers.withLock { $0.subjectHandler } }
        set { subscribers.withLock { $0.subjectHandler = newValue } }
    }

    /// Where the subject of an event's operation is read (the queue's entries), when the event
    /// is emitted and only while a subject handler is set. Asked without any of the hub's
    /// locks held; never call ``emit(_:)`` while holding the lock it takes. (Held weakly: the
    /// queue holds the hub.)
    private let subjectSource = Locked(WeakSubjectSource())

    private struct WeakSubjectSource: @unchecked Sendable {
        // @unchecked: only reached through `Locked`, and the source is `Sendable`.
        weak var source: (any EventSubjectSource)?
    }

    func setSubjectSource(_ source: any EventSubjectSource) {
        subjectSource.withLock { $0.source = source }
    }

    /// Adds an observer of every event emitted from now on, with its subject; returns the key
    /// that removes it.
    func addObserver(_ observer: @escaping @Sendable (PersistentOperationEvent, PersistentOperationEvent.Subject?) -> Void) -> UInt64 {
        subscribers.withLock { subscribers in
            subscribers.nextKey += 1
            subscribers.observers.append((subscribers.nextKey, observer))
            return subscribers.nextKey
        }
    }

    func removeObserver(_ key: UInt64) {
        subscribers.withLock { $0.observers.removeAll { $0.key == key } }
    }

    /// Whether the subjects of events are read: a subject handler or an observer is set.
    private static func needsSubjects(_ subscribers: Subscribers) -> Bool {
        subscribers.subjectHandler != nil || !subscribers.observers.isEmpty
    }

    /// A new stream of every event emitted from now on.
    func makeStream() -> AsyncStream<PersistentOperationEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: PersistentOperationEvent.self)
        let key = subscribers.withLock { subscribers in
            subscribers.nextKey += 1
            subscribers.streams[subscribers.nextKey] = continuation
            return subscribers.nextKey
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.streams.removeValue(forKey: key) }
        }
        return stream
    }

    /// Adds an observer of the queue's own, called with every event before the handler, on
    /// the delivery queue: it sees every event emitted after this call and none emitted before
    /// (those still waiting for delivery included).
    func addMonitor(_ key: ObjectIdentifier, _ monitor: @escaping @Sendable (PersistentOperationEvent) -> Void) {
        // Counted at once, so that the events emitted until the registration runs are queued
        // for it rather than dropped for want of subscribers.
        subscribers.withLock { $0.monitorsToRegister += 1 }
        delivery.async {
            self.subscribers.withLock { subscribers in
                subscribers.monitors[key] = monitor
                subscribers.monitorsToRegister -= 1
            }
        }
    }

    func removeMonitor(_ key: ObjectIdentifier) {
        subscribers.withLock { _ = $0.monitors.removeValue(forKey: key) }
    }

    /// Whether anyone listens. Events emitted while no one does are dropped at once rather
    /// than queued for delivery: a dispatch to the delivery queue wakes a thread, three times
    /// in every operation's lifecycle.
    var hasSubscribers: Bool {
        subscribers.withLock {
            $0.handler != nil || Self.needsSubjects($0) || !$0.streams.isEmpty || !$0.monitors.isEmpty || $0.monitorsToRegister > 0
        }
    }

    func emit(_ event: PersistentOperationEvent) {
        emit(contentsOf: [event])
    }

    /// Emits the events of operations stored just now, whose entries may not exist yet: their
    /// subjects are their records'.
    func emit(enqueued records: [OperationRecord]) {
        emit(
            contentsOf: records.map { .enqueued(PersistentOperationID(record: $0.id), typeIdentifier: $0.typeIdentifier) },
            subjects: records.map {
                PersistentOperationEvent.Subject(
                    typeIdentifier: $0.typeIdentifier, tags: Set($0.tags), lane: $0.lane,
                    attempt: $0.numberOfAttempts, attemptDuration: nil, enqueuedAt: $0.enqueuedAt
                )
            }
        )
    }

    /// Emits `events` in order, with one hop to the delivery queue for all of them.
    /// `subjects`: the subject of each event, when the caller knows them; otherwise they are
    /// read from ``subjectProvider`` (only while a subject handler is set).
    func emit(contentsOf events: [PersistentOperationEvent], subjects known: [PersistentOperationEvent.Subject?]? = nil) {
        guard !events.isEmpty, hasSubscribers else { return }
        // The subjects are read now: by delivery time, an operation that ended is forgotten.
        let source = subscribers.withLock { Self.needsSubjects($0) } ? subjectSource.withLock { $0.source } : nil
        let subjects = source.map { source in known ?? events.map(source.subject(for:)) } ?? []
        delivery.async {
            let (handler, subjectHandler, streams, monitors, observers) = self.subscribers.withLock {
                ($0.handler, $0.subjectHandler, Array($0.streams.values), $0.monitors, $0.observers)
            }
            for (index, event) in events.enumerated() {
                for monitor in monitors.values { monitor(event) }
                handler?(event)
                let subject = index < subjects.count ? subjects[index] : nil
                subjectHandler?(event, subject)
                for observer in observers { observer.observer(event, subject) }
                for stream in streams {
                    stream.yield(event)
                }
            }
        }
    }

    /// Waits until every event emitted so far has been delivered.
    /// Runs `body` on the delivery queue, after the events emitted before it.
    func deliver(_ body: @escaping @Sendable () -> Void) {
        delivery.async(execute: body)
    }

    func flush() {
        delivery.sync {}
    }

    func finishStreams() {
        let streams = subscribers.withLock { subscribers in
            defer { subscribers.streams = [:] }
            return Array(subscribers.streams.values)
        }
        delivery.async {
            for stream in streams { stream.finish() }
        }
    }
}
