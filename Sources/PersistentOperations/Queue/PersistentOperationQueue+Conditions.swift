import Foundation

// Run conditions: a record may name conditions that must all hold before each of its attempts
// starts. The app registers a provider per name; the queue keeps, under its lock, whether each
// held when its provider last reported (`State.conditionStates`: providers are user code, never
// called under the lock), and reads them on its providers' change reports, one at a time on
// `conditionQueue`, so the last report handled reads the provider's latest value.
//
// A due entry whose conditions do not all hold is parked: `queueOrHold` (and a slot that starts
// when one stopped holding) puts it in `waitingForConditions`, under the first condition that
// does not hold (`State.conditionWaiters`), with no slot, timer or poll. When a report says that
// condition holds, every entry parked under it is looked at once: one still waiting for another
// condition is parked under that one, the others become ready — in run order, as the ready heap
// orders them — and the slot window is refilled. Each entry is looked at once per condition it
// waited for, so releasing n entries is O(n log n). A name with no provider never holds: its
// records wait, and are reported, until one is registered.

extension PersistentOperationQueue {
    /// A provider registered for a condition name, and the queue's observation of it.
    struct RegisteredCondition: Sendable {
        var condition: any RunCondition
        var observation: any RunConditionObservation
    }

    /// Registers `condition` under `name`: operations added with that name in
    /// ``EnqueueOptions/conditions`` start only while it holds (with their other conditions).
    ///
    /// Register every condition your operations name before ``restore()`` and before adding
    /// them. A second registration under the same name replaces the first. The queue reads
    /// `RunCondition.isSatisfied` now and whenever the condition reports a change; it never
    /// polls.
    ///
    /// ```swift
    /// let online = ManualRunCondition(isSatisfied: false)
    /// queue.register(online, as: "network")
    /// online.isSatisfied = true      // what waited for the network starts now
    /// ```
    public func register(_ condition: any RunCondition, as name: String) {
        let observation = condition.observeChanges { [weak self] in
            guard let self else { return }
            self.conditionQueue.async { self.conditionMayHaveChanged(name) }
        }
        let replaced = conditionProviders.withLock { providers in
            defer { providers[name] = RegisteredCondition(condition: condition, observation: observation) }
            return providers[name]
        }
        replaced?.observation.cancel()
        conditionQueue.sync { conditionMayHaveChanged(name) }
    }

    /// Throws ``PersistenceError/Code/unknownCondition`` when a name has no provider.
    func checkConditionsRegistered(_ names: Set<String>) throws {
        guard !names.isEmpty else { return }
        let unknown = conditionProviders.withLock { providers in names.filter { providers[$0] == nil } }
        guard unknown.isEmpty else {
            throw PersistenceError(
                .unknownCondition,
                "No run condition is registered as \(unknown.sorted().map { "\"\($0)\"" }.joined(separator: ", ")); call register(_:as:) before adding operations that name it."
            )
        }
    }

    /// On `conditionQueue`: reads the provider of `name` and, when the condition holds now,
    /// releases the entries waiting for it.
    private func conditionMayHaveChanged(_ name: String) {
        guard let provider = conditionProviders.withLock({ $0[name]?.condition }) else { return }
        let holds = provider.isSatisfied
        let window = slotWindow()
        let slots = state.withLock { state -> [AttemptSlot] in
            guard state.conditionStates[name] != holds else { return [] }
            state.conditionStates[name] = holds
            guard holds else { return [] }
            return releaseParked(under: name, in: &state, window: window)
        }
        if holds { log(.debug, "run condition \"\(name)\" holds") }
        for slot in slots {
            operationQueue.addOperation(slot)
        }
    }

    /// Under the lock: the entries parked under `name` (a condition that holds now, or a pause
    /// that ended) are looked at again: one still waiting for another condition or pause is
    /// parked under that one, the others become ready. Returns the slots to queue.
    func releaseParked(under name: String, in state: inout State, window: Int) -> [AttemptSlot] {
        guard let waiting = state.conditionWaiters.removeValue(forKey: name) else { return [] }
        for id in waiting {
            guard var entry = state.entries[id], case .waitingForConditions = entry.phase, entry.parkedUnder == name else { continue }
            entry.parkedUnder = nil
            if let other = firstUnmetCondition(of: entry, in: state) {
                park(&entry, under: other, in: &state)
            } else {
                rejoinIsolation(id, in: &state)
                hold(&entry, in: &state)
            }
            state.entries[id] = entry
        }
        return fillSlots(in: &state, window: window)
    }

    /// Under the lock: parks a due entry whose conditions do not all hold, or that a pause
    /// holds, under the first that does not hold; whether it did.
    func parkUnlessConditionsHold(_ entry: inout Entry, in state: inout State) -> Bool {
        guard !entry.record.conditions.isEmpty || !state.pauses.isEmpty || state.focus != nil,
              let unmet = firstUnmetCondition(of: entry, in: state)
        else { return false }
        park(&entry, under: unmet, in: &state)
        return true
    }

    /// Under the lock: the key of a pause that holds the entry, or else the first of the
    /// entry's conditions that does not hold, if any.
    func firstUnmetCondition(of entry: Entry, in state: State) -> String? {
        if isOutOfFocus(entry.record, in: state) { return Self.focusKey }
        if !state.pauses.isEmpty, let pause = pauseKey(holding: entry, in: state) { return pause }
        return entry.record.conditions.first { state.conditionStates[$0] != true }
    }

    /// Under the lock: parks a due entry until `condition` holds. An entry that had to run
    /// alone leaves the isolation list while it waits, so the next one may run (a caller that
    /// parked the list's head fills the slots again: `queueOrHoldRefilling`), and goes back to
    /// the end of the list when released: it still runs alone.
    func park(_ entry: inout Entry, under condition: String, in state: inout State) {
        state.conditionWaiters[condition, default: []].insert(entry.record.id)
        setParked(&entry, under: condition, in: &state)
    }

    /// Under the lock: marks a due entry as parked under `key` (a condition, a pause or a
    /// concurrency limit, whose waiters the caller records), taking it off the isolation list
    /// as ``park(_:under:in:)`` says.
    func setParked(_ entry: inout Entry, under key: String, in state: inout State) {
        entry.phase = .waitingForConditions
        entry.parkedUnder = key
        if state.isolation.contains(entry.record.id) {
            endIsolation(of: entry.record.id, in: &state)
            state.waitingToRunAlone.insert(entry.record.id)
        }
    }

    /// Under the lock: forgets that a forgotten entry waits for a condition, or to run alone.
    func unpark(_ entry: Entry, in state: inout State) {
        state.waitingToRunAlone.remove(entry.record.id)
        guard let condition = entry.parkedUnder else { return }
        state.conditionWaiters[condition]?.remove(entry.record.id)
        if state.conditionWaiters[condition]?.isEmpty == true {
            state.conditionWaiters.removeValue(forKey: condition)
        }
    }

    /// The conditions named by `records` that no provider is registered for, by record.
    func unknownConditions(of records: [(id: String, conditions: [String])]) -> [UnknownConditionRecord] {
        let registered = conditionProviders.withLock { Set($0.keys) }
        return records.compactMap { record in
            let unknown = record.conditions.filter { !registered.contains($0) }
            return unknown.isEmpty ? nil : UnknownConditionRecord(id: PersistentOperationID(record: record.id), conditions: unknown)
        }
    }
}

/// A pending record that names run conditions no provider is registered for. It waits, kept
/// on disk, until one is registered (``PersistentOperationQueue/register(_:as:)``).
public struct UnknownConditionRecord: Sendable, Hashable {
    /// The record's identifier.
    public var id: PersistentOperationID
    /// The names without a provider.
    public var conditions: [String]
}
