import Foundation

// Isolation: after a launch that may have crashed while several attempts were in flight, each
// of those operations runs its next attempt alone, so that a crash singles out the one that
// causes it.
//
// `restore()` reads the suspects `RecordStore.beginLaunch` made of the last launch's attempt
// markers (see `RecordStore+CrashEvidence`): an operation with `crashLimit` crashes attributed to
// it goes to the failed area; the others that must run alone go in `State.isolation`, those
// with crashes on file first (a poison operation is tried again first, and caught within
// `crashLoopLimit` crashed launches), then in run order. While the list is not empty, the
// first of them is the only operation given a slot, and only once no other slot is in the
// `OperationQueue`; everything else that becomes due waits in `State.ready`. When its slot
// leaves (the attempt ended: success, retry wait, failure, cancellation) the next one runs;
// when the list is empty, the ready operations fill the window as usual.
//
// An operation of the list that cannot start an attempt now — it waits for a date, for its
// prerequisites (a power cut can leave a prerequisite pending whose dependent was in flight)
// or for a run condition — is set aside (`State.waitingToRunAlone`) so that nothing waits
// behind it, and goes back to the end of the list when it becomes due: it still runs alone.
// Every path that holds an operation back because of the list (`queueOrHoldRefilling`), or
// makes its head wait (`schedule`, `park`), fills the slots again, so the list never holds
// the queue while its head cannot run. So a launch after a crash runs at most as many
// attempts one at a time as were in flight at the crashes not yet explained, then everything
// else, and it never stalls, whatever records and evidence a crash or a power cut left.
//
// Suspects of kills (in flight when the app was killed while active) wait in
// `State.isolationAfterOthers` instead, fewest kills on file first: due, they are held in
// `State.ready` until nothing else is ready or in flight, then the first of them that is due
// moves to `State.isolation` and runs alone. Ordinary work is not held back by them, and a kill
// from outside at a random moment of a launch rarely finds one of them alone — nor the same
// one launch after launch, while a poison is killed whenever its turn comes.

extension PersistentOperationQueue {
    /// Under the lock: whether `id` may be given a slot now, as far as isolation goes.
    func isolationAllows(_ id: String, in state: State) -> Bool {
        guard let head = state.isolation.first else { return !state.isolationAfterOthers.contains(id) }
        return id == head && state.slotsInQueue == 0
    }

    /// Under the lock: the slots to add to the `OperationQueue` now — the first isolated
    /// operation's, when nothing else is in flight, or as many ready operations as the window
    /// has room for once none is isolated. Isolated operations that cannot start now are set
    /// aside on the way.
    func fillSlots(in state: inout State, window: Int) -> [AttemptSlot] {
        while let head = state.isolation.first {
            guard state.slotsInQueue == 0 else { return [] }
            guard var entry = state.entries[head] else {
                state.isolation.removeFirst()
                continue
            }
            switch entry.phase {
            case .ready:
                // Nothing else is in flight: `queueOrHold` gives it the slot — unless a run
                // condition does not hold, and it waits for that with the rest.
                let slot = queueOrHold(&entry, in: &state, window: window)
                state.entries[head] = entry
                if case .waitingForConditions = entry.phase {
                    continue   // `park` took it off the list
                }
                return slot.map { [$0] } ?? []
            case .scheduled(nil), .queued, .running:
                // Being scheduled (`schedule` fills the slots again if it must wait for a
                // date), or already holding one.
                return []
            case .scheduled(.some), .blocked, .waitingForConditions:
                // Not due now: the others run meanwhile, and it runs alone once due.
                state.isolation.removeFirst()
                state.waitingToRunAlone.insert(head)
            case .waitingToRetry:
                // Its attempt has ended (its slot is about to leave).
                state.isolation.removeFirst()
            }
        }
        var slots: [AttemptSlot] = []
        var heldBack: [ReadySlot] = []
        while state.slotsInQueue < window, let next = state.ready.popFirst() {
            state.fairShare.took(round: next.round)
            // Skip what was cancelled or forgotten while it waited. (The slot holds its
            // identifier as a key: spelled out once.)
            let id = next.id
            guard var entry = state.entries[id], case .ready = entry.phase else { continue }
            if !state.isolationAfterOthers.isEmpty, state.isolationAfterOthers.contains(id) {
                heldBack.append(next)   // its turn comes once nothing else is due
                continue
            }
            if let slot = queueOrHold(&entry, in: &state, window: window) { slots.append(slot) }
            state.entries[id] = entry
        }
        for next in heldBack { state.ready.insert(next) }
        if state.slotsInQueue == 0, !heldBack.isEmpty, let turn = nextRunningAloneAfterOthers(in: state) {
            // Nothing else is due or in flight: the first suspect of kills that is due runs alone.
            state.isolationAfterOthers.removeAll { $0 == turn }
            state.isolation.append(turn)
            return fillSlots(in: &state, window: window)
        }
        return slots
    }

    /// Under the lock: the first operation of `isolationAfterOthers` that is due (waits in `ready`).
    private func nextRunningAloneAfterOthers(in state: State) -> String? {
        state.isolationAfterOthers.first { id in
            if case .ready? = state.entries.phase(of: id) { return true }
            return false
        }
    }

    /// Gives room to what waits, after the isolated operation at the head of the list left it.
    func refillSlots() {
        let window = slotWindow()
        let slots = state.withLock { fillSlots(in: &$0, window: window) }
        for slot in slots {
            operationQueue.addOperation(slot)
        }
    }

    /// Under the lock: an operation that must run alone and was set aside while it could not
    /// start has become due: back to the end of the list.
    func rejoinIsolation(_ id: String, in state: inout State) {
        if state.waitingToRunAlone.remove(id) != nil {
            state.isolation.append(id)
        }
    }

    /// Under the lock: an isolated operation's attempt has ended (its slot left), or it was
    /// forgotten: the next one may run.
    func endIsolation(of id: String, in state: inout State) {
        if state.isolation.first == id {
            state.isolation.removeFirst()
        } else if let index = state.isolation.firstIndex(of: id) {
            state.isolation.remove(at: index)
        }
    }

    /// Under the lock: a suspect of kills is forgotten before its turn came.
    func endIsolationAfterOthers(of id: String, in state: inout State) {
        if let index = state.isolationAfterOthers.firstIndex(of: id) {
            state.isolationAfterOthers.remove(at: index)
        }
    }
}
