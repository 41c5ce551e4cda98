import Foundation

// Lanes: operations added with one `EnqueueOptions.lane` run one at a time, in add order.
//
// A lane is a FIFO of entries in `State.lanes`: its `current` entry is the one whose turn it is
// (it may still wait for its date, prerequisites, conditions or a retry: it keeps the lane
// meanwhile); the others are `blocked` with `waitsForLane` set, in no timer, heap or slot. When
// the current entry is forgotten — however it ended — the next live one becomes current and is
// scheduled (or stays blocked for its prerequisites): O(1) per add and per turn. An entry that
// leaves while it waits (cancelled, expired) stays in the FIFO and is skipped when reached.
//
// The order is the records' enqueue sequence, which is saved: a restore (or a re-queue from the
// failed area) inserts records at their place, so the order survives crashes and relaunches.
// A current entry that fails for good with `laneHoldsOnFailure` is written to the failed area
// with `isHoldingLane` and becomes the lane's `holder`: nothing in the lane runs until it is
// re-queued (it becomes current again) or purged. A restore reads the holders back from the
// failed area. Before the first restore, an add into a lane that has stored records not yet
// restored waits (`State.storedLanes`, read once, like the unique keys of `+StoredKeys`).
//
// Every function here runs under `state`'s lock; events and scheduling are left to the caller.

extension PersistentOperationQueue {
    /// One ordered lane.
    struct Lane: Sendable {
        /// A member waiting for its turn: the record and the sequence it joined with (a member
        /// that left and came back, re-queued, is not taken for its old place).
        struct Member: Sendable {
            var id: String
            var sequence: UInt64
        }

        /// The entry whose turn it is, if any.
        var current: String?
        /// The failed record that holds the lane (``EnqueueOptions/holdsLaneOnFailure``).
        var holder: String?
        /// Live members waiting (those in ``members`` that have left are not counted).
        var waitingCount = 0
        /// Waiting members in enqueue order, from `start` on; some may have left.
        private var members: [Member] = []
        private var start = 0

        var isUnused: Bool { current == nil && holder == nil && waitingCount == 0 }

        /// The waiting members in order, those that left included.
        var waiting: ArraySlice<Member> { members[start...] }

        /// Adds a member at its place in enqueue order: at the end, unless records were
        /// stored concurrently or restored out of order (a binary search then).
        mutating func insert(_ member: Member) {
            guard let last = members.last, last.sequence > member.sequence, start < members.count else {
                members.append(member)
                return
            }
            var low = start, high = members.count
            while low < high {
                let middle = (low + high) / 2
                if members[middle].sequence > member.sequence { high = middle } else { low = middle + 1 }
            }
            members.insert(member, at: low)
        }

        /// Takes the first waiting member, live or not.
        mutating func popFirst() -> Member? {
            guard start < members.count else { return nil }
            let member = members[start]
            start += 1
            if start == members.count {
                members.removeAll(keepingCapacity: members.count < 1024)
                start = 0
            } else if start >= 1024, start * 2 >= members.count {
                members.removeFirst(start)
                start = 0
            }
            return member
        }
    }

    /// Under the lock: puts a newly tracked entry (added, restored or re-queued) in its lane.
    /// It becomes the lane's current entry when the lane is free, or takes the lane back when
    /// it is the failed record holding it; otherwise it waits, `blocked`. Returns whether it
    /// waits, and how many members are ahead of it.
    @discardableResult
    func joinLane(_ id: String, in state: inout State) -> (waits: Bool, ahead: Int) {
        // (Most entries are in no lane: the entry is looked up once and read in place, its lane's
        // name and its sequence, not copied.)
        let member = state.entries[id].flatMap { entry in entry.record.lane.map { (name: $0, sequence: entry.record.enqueueSequence) } }
        guard let (name, sequence) = member else { return (false, 0) }
        // Taken out of the table while it changes, so that its members are not copied.
        var lane = state.lanes.removeValue(forKey: name) ?? Lane()
        defer { state.lanes[name] = lane }
        if lane.holder == id, lane.current == nil {
            // The record that held the lane, re-queued: its turn again, before the others.
            lane.holder = nil
            state.laneHolders.removeValue(forKey: id)
            state.heldLaneWaiters -= lane.waitingCount
            lane.current = id
            return (false, 0)
        }
        let waitsForStored = !state.hasRestored && state.storedLanes?.contains(name) == true
        if lane.current == nil, lane.holder == nil, lane.waitingCount == 0, !waitsForStored {
            lane.current = id
            return (false, 0)
        }
        let ahead = lane.waitingCount + (lane.current == nil ? 0 : 1)
        lane.insert(Lane.Member(id: id, sequence: sequence))
        lane.waitingCount += 1
        if lane.holder != nil { state.heldLaneWaiters += 1 }
        state.entries.withEntry(id) { entry in
            entry.waitsForLane = true
            entry.phase = .blocked
        }
        return (true, ahead)
    }

    /// What a lane's change leaves to do outside the lock.
    struct LaneChange {
        /// Entries whose turn came and that wait for nothing else: to schedule.
        var unblocked: [(id: String, due: Date?)] = []
        /// A lane that a failure now holds, and the failed record holding it.
        var held: (lane: String, by: String)?
    }

    /// Under the lock: the entry `entry` (already removed from the table) has left its lane:
    /// when it was the current entry, the next one's turn comes (or, when it failed for good
    /// holding the lane, the lane holds).
    func leaveLane(_ entry: Entry, ending: Entry.Ending?, in state: inout State) -> LaneChange {
        guard let name = entry.record.lane, state.lanes[name] != nil else { return LaneChange() }
        let id = entry.record.id
        guard entry.waitsForLane || state.lanes[name]?.current == id else { return LaneChange() }
        var lane = state.lanes.removeValue(forKey: name)!
        var change = LaneChange()
        if entry.waitsForLane {
            lane.waitingCount -= 1
            if lane.holder != nil { state.heldLaneWaiters -= 1 }
        } else if lane.current == id {
            lane.current = nil
            if ending == .failed, entry.record.laneHoldsOnFailure {
                lane.holder = id
                state.laneHolders[id] = name
                state.heldLaneWaiters += lane.waitingCount
                change.held = (name, id)
            }
        }
        change.unblocked = advance(&lane, named: name, in: &state)
        state.lanes[name] = lane.isUnused ? nil : lane
        return change
    }

    /// Under the lock: when `lane` is free (no current entry, no holder, no stored records
    /// to wait for), makes its first live waiting member current; returns it when it waits
    /// for nothing else.
    private func advance(_ lane: inout Lane, named name: String, in state: inout State) -> [(id: String, due: Date?)] {
        guard lane.current == nil, lane.holder == nil else { return [] }
        guard state.hasRestored || state.storedLanes?.contains(name) != true else { return [] }
        while lane.waitingCount > 0, let member = lane.popFirst() {
            guard var next = state.entries[member.id], next.waitsForLane, next.ending == nil,
                  next.record.enqueueSequence == member.sequence, next.record.lane == name else { continue }
            next.waitsForLane = false
            lane.waitingCount -= 1
            lane.current = member.id
            var unblocked: [(id: String, due: Date?)] = []
            if next.remainingPrerequisites == 0, case .blocked = next.phase {
                next.phase = .scheduled(nil)
                unblocked.append((member.id, next.record.dueDate))
            }
            state.entries[member.id] = next
            return unblocked
        }
        return []
    }

    /// Under the lock: the lanes the failed records in `holders` (record → lane) hold. Records
    /// already re-queued are left out.
    func holdLanes(_ holders: [(id: String, lane: String)], in state: inout State) {
        for holder in holders where state.entries[holder.id] == nil && state.laneHolders[holder.id] == nil {
            guard state.lanes[holder.lane].map({ $0.holder == nil && $0.current == nil }) ?? true else { continue }
            var lane = state.lanes.removeValue(forKey: holder.lane) ?? Lane()
            lane.holder = holder.id
            state.laneHolders[holder.id] = holder.lane
            state.heldLaneWaiters += lane.waitingCount
            state.lanes[holder.lane] = lane
        }
    }

    /// Under the lock: gives every free lane with waiting members its next turn (after a
    /// restore, once every record is in its lane).
    func advanceFreeLanes(in state: inout State) -> [(id: String, due: Date?)] {
        var unblocked: [(id: String, due: Date?)] = []
        for name in Array(state.lanes.keys) {
            guard let free = state.lanes[name].map({ $0.current == nil && $0.holder == nil }), free else { continue }
            var lane = state.lanes.removeValue(forKey: name)!
            unblocked += advance(&lane, named: name, in: &state)
            state.lanes[name] = lane.isUnused ? nil : lane
        }
        return unblocked
    }

    /// Under the lock: the failed record `id` was purged; the lane it held, if any, moves on.
    func releaseLane(heldBy id: String, in state: inout State) -> [(id: String, due: Date?)] {
        guard let name = state.laneHolders.removeValue(forKey: id), state.lanes[name]?.holder == id else { return [] }
        var lane = state.lanes.removeValue(forKey: name)!
        lane.holder = nil
        state.heldLaneWaiters -= lane.waitingCount
        let unblocked = advance(&lane, named: name, in: &state)
        state.lanes[name] = lane.isUnused ? nil : lane
        return unblocked
    }

    /// Under the lock: the position of every live member of the lanes named `names`: 0 for
    /// the current entry, then 1, 2, … in lane order. Members of a held lane have none.
    func lanePositions(of names: Set<String>, in state: State) -> [String: Int] {
        var positions: [String: Int] = [:]
        for name in names {
            guard let lane = state.lanes[name], lane.holder == nil else { continue }
            var position = 0
            if let current = lane.current {
                positions[current] = 0
                position = 1
            }
            for member in lane.waiting {
                guard let entry = state.entries[member.id], entry.waitsForLane, entry.record.enqueueSequence == member.sequence,
                      positions[member.id] == nil else { continue }
                positions[member.id] = position
                position += 1
            }
        }
        return positions
    }

    /// Schedules entries that waited for nothing but their prerequisites or their turn in a
    /// lane (``LaneChange/unblocked``), after the lock.
    func scheduleUnblocked(_ unblocked: [(id: String, due: Date?)]) {
        for (id, due) in unblocked {
            hub.emit(.unblocked(PersistentOperationID(record: id)))
            schedule(id, due: due)
        }
    }

    /// Before the first restore: reads, once, the lanes that stored records not yet restored
    /// are in, and those that failed records hold, so that an add into one of them waits for
    /// the restore. Call with `graphLock` held.
    ///
    /// - Throws: ``PersistenceError`` when the store cannot be read.
    func loadStoredLanesIfNeeded() throws {
        guard state.withLock({ !$0.hasRestored && $0.storedLanes == nil }) else { return }
        let tracked = state.withLock { Set($0.entries.keys) }
        var lanes = Set<String>()
        try store.readPendingRecords { record in
            if let lane = record.lane, !tracked.contains(record.id) { lanes.insert(lane) }
        }
        for record in try store.loadFailed().records where record.isHoldingLane {
            if let lane = record.lane { lanes.insert(lane) }
        }
        state.withLock { $0.storedLanes = lanes }
    }

    /// The failed records that hold their lanes, read from the failed area.
    func storedLaneHolders() throws -> [(id: String, lane: String)] {
        try store.loadFailed().records.compactMap { record in
            guard record.isHoldingLane, let lane = record.lane else { return nil }
            return (record.id, lane)
        }
    }

    /// Refuses options a lane cannot take.
    func checkLaneOptions(_ options: EnqueueOptions) throws {
        guard let lane = options.lane else {
            if options.holdsLaneOnFailure {
                throw PersistenceError(.invalidOptions, "options.holdsLaneOnFailure is set without options.lane; set the lane the operation runs in, or leave holdsLaneOnFailure false.")
            }
            return
        }
        if lane.isEmpty {
            throw PersistenceError(.invalidOptions, "options.lane is an empty string; name the lane (for example \"chat:42\"), or leave it nil.")
        }
        if options.repeating != nil {
            throw PersistenceError(.invalidOptions, "A periodic operation (options.repeating) cannot be in a lane: a series never ends, so the operations behind it would never run. Add the series without options.lane.")
        }
    }
}
