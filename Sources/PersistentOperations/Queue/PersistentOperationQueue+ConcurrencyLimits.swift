import Foundation

// Concurrency limits: at most N attempts at once of the operations that carry a tag
// (`Configuration.concurrencyLimits`). A slot counts against each limited tag of its operation
// from when the queue gives it (`queueOrHold`) until it leaves the `OperationQueue`
// (`slotDidLeave`), the same span that `slotsInQueue` counts. A due operation whose limited tag
// is at its limit when it would get a slot is parked (as run conditions park: no slot, timer or
// poll; reported `queued`, since it waits for room), in that tag's heap in run order. Each slot
// that leaves lets out, per tag it counted against that is now under its limit, the first
// operation parked for the tag, which goes back to the ready operations; one that finds the
// tag at its limit again (another took the room first) is parked again. Entries forgotten
// while parked are skipped when their turn comes.

extension PersistentOperationQueue {
    /// The prefix of the keys under which operations wait for a concurrency limit.
    static let limitKeyPrefix = "\u{1}limit:"

    /// The tags of `entry` that have a concurrency limit.
    func limitedTags(of entry: Entry) -> [String] {
        let limits = configuration.concurrencyLimits
        guard !limits.isEmpty else { return [] }
        return entry.record.tags.filter { limits[$0] != nil }
    }

    /// Under the lock: parks a due entry when one of its limited tags is at its limit; whether
    /// it did.
    func parkUnlessUnderLimits(_ entry: inout Entry, in state: inout State) -> Bool {
        let limits = configuration.concurrencyLimits
        guard !limits.isEmpty else { return false }
        guard let full = entry.record.tags.first(where: { tag in limits[tag].map { state.limitCounts[tag, default: 0] >= $0 } ?? false }) else {
            return false
        }
        park(&entry, in: \.limitWaiters, tag: full, key: Self.limitKeyPrefix + full, state: &state)
        return true
    }

    /// Under the lock: parks a due entry under `key` in the heap of `tag` among `waiters` (a
    /// limit's waiting operations, first to run first).
    func park(_ entry: inout Entry, in waiters: WritableKeyPath<State, [String: Heap<ReadySlot>]>, tag: String, key: String, state: inout State) {
        state[keyPath: waiters][tag, default: Heap(by: ReadySlot.runsBefore)].insert(ReadySlot(id: entry.record.id, order: entry.record.runOrder))
        setParked(&entry, under: key, in: &state)
    }

    /// Under the lock: the first entry still parked under `key` in the heap of `tag` among
    /// `waiters` goes back to the ready operations (the caller fills the slots); whether there
    /// was one. Entries forgotten or let out meanwhile are skipped; an emptied heap is dropped.
    func letOutNextParked(from waiters: WritableKeyPath<State, [String: Heap<ReadySlot>]>, tag: String, key: String, state: inout State) -> Bool {
        defer { if state[keyPath: waiters][tag]?.count == 0 { state[keyPath: waiters][tag] = nil } }
        while let next = state[keyPath: waiters][tag]?.popFirst() {
            let id = next.id
            guard var entry = state.entries[id], case .waitingForConditions = entry.phase, entry.parkedUnder == key else { continue }
            entry.parkedUnder = nil
            rejoinIsolation(id, in: &state)
            hold(&entry, in: &state)
            state.entries[id] = entry
            return true
        }
        return false
    }

    /// Under the lock: counts a slot just given against its tags' limits.
    func countAgainstLimits(_ slot: AttemptSlot, in state: inout State) {
        for tag in slot.limitedTags { state.limitCounts[tag, default: 0] += 1 }
    }

    /// Under the lock: a slot left; for each of its tags now under its limit, the first entry
    /// parked for that tag becomes ready (the caller fills the slots).
    func releaseLimits(of slot: AttemptSlot, in state: inout State) {
        let limits = configuration.concurrencyLimits
        for tag in slot.limitedTags {
            let count = state.limitCounts[tag, default: 1] - 1
            state.limitCounts[tag] = count > 0 ? count : nil
            guard let limit = limits[tag], count < limit else { continue }
            _ = letOutNextParked(from: \.limitWaiters, tag: tag, key: Self.limitKeyPrefix + tag, state: &state)
        }
    }
}
