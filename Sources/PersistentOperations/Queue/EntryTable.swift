import Foundation

extension PersistentOperationQueue {
    /// The queue's entries by record identifier, as a dictionary would hold them, in less
    /// memory: the entries sit in arrays, and a dictionary maps each identifier to its
    /// position.
    ///
    /// An entry is large (240 bytes: its record, its phase and its bookkeeping, and its
    /// identifier's allocation of 80 more). A dictionary of entries keeps each one in its hash
    /// table, whose slots number a power of two at most three quarters full: at 100,000 entries
    /// that is 262,144 slots of 256 bytes, 67 MB. Here only the small position table pays for the
    /// empty slots. And an entry that only waits its turn (see ``Entry/compacted(type:)``: due or
    /// scheduled, nothing but its record) is kept compact, 64 bytes (its type identifier an ordinal
    /// into ``TypeIdentifiers``) with its identifier held as a UUID, and made whole again when it
    /// is read or changed; a backlog of a million takes about 88 MB instead of 330. Removing an
    /// entry moves the last one of its kind into its place, so the order of iteration is no order
    /// at all, as a dictionary's.
    ///
    /// ```swift
    /// let record = OperationRecord(typeIdentifier: "com.example.upload", payload: Data([1]), enqueueSequence: 1, enqueuedAt: Date())
    /// var table = PersistentOperationQueue.EntryTable()
    /// table[record.id] = PersistentOperationQueue.Entry(record: record, operation: nil, attemptsInFlight: 0)   // add or replace
    /// table[record.id]?.kills += 1                       // change in place
    /// for (id, entry) in table { print(id, entry.kills) }
    /// table.removeValue(forKey: record.id)              // the entry it held, or nil
    /// ```
    struct EntryTable: Sendable, Sequence {
        // Where each entry is: a position in `full` (0, 1, …) or in `compact` (-1, -2, …:
        // `~position`). Identifiers in canonical form are keyed by their UUID.
        private var positions = PositionIndex()
        private var textPositions: [String: Int32] = [:]
        /// The whole entries, never `nil` between calls: optional so that an entry can be
        /// changed in place, through the array's own element access (see the subscript's
        /// `_modify`).
        private var full: [Entry?] = []
        private var fullIDs: [String] = []
        /// The UUID of each whole entry's identifier, for ``positions`` (zero for an
        /// identifier not in canonical form, which ``positions`` never holds).
        private var fullKeys: [UUIDBits] = []
        private var compact: [Entry.Compact] = []
        private var compactIDs: [UUIDBits] = []
        /// The type identifiers compact entries hold as ordinals (`record.type`).
        private var types = TypeIdentifiers()

        /// How many entries the table holds.
        var count: Int { full.count + compact.count }
        /// Whether the table holds no entry.
        var isEmpty: Bool { full.isEmpty && compact.isEmpty }
        /// How many of them are held compact.
        var compactCount: Int { compact.count }
        /// The identifiers of the entries, in the order of ``values``.
        var keys: [String] { fullIDs + compactIDs.map(RecordIdentifier.string(of:)) }
        /// The entries, in the order of ``keys``: a view of the table, not a copy of its
        /// entries (a million whole entries take 240 MB).
        var values: Values { Values(table: self) }

        /// An entry of the table, as a dictionary's `first`: no particular one.
        var first: (key: String, value: Entry)? {
            var iterator = makeIterator()
            return iterator.next()
        }

        /// The entry of `id`; setting `nil` removes it. Changing a field of an entry
        /// (`table[id]?.kills += 1`) changes it in place: a whole entry is not copied out and
        /// back, nor its identifier hashed twice.
        subscript(id: String) -> Entry? {
            // Read in place: `table[id]?.phase` copies the phase, not the entry.
            _read {
                switch position(of: RecordKey(id)) {
                case let position? where position >= 0: yield full[Int(position)]
                case let position?: yield self.entry(atCompact: ~Int(position), id: id)
                case nil: yield nil
                }
            }
            set {
                if let newValue {
                    store(newValue, forKey: id)
                } else {
                    removeValue(forKey: id)
                }
            }
            _modify {
                let key = RecordKey(id)
                switch position(of: key) {
                case let position? where position >= 0:
                    let index = Int(position)
                    defer { settleFull(at: index, key: key) }
                    yield &full[index]
                case let position?:
                    let index = ~Int(position)
                    var entry: Entry? = self.entry(atCompact: index, id: id)
                    defer { settleCompact(at: index, id: id, key: key, entry) }
                    yield &entry
                case nil:
                    var added: Entry?
                    defer {
                        if let added { insert(added, id: id, key: key) }
                    }
                    yield &added
                }
            }
        }

        /// The phase of the entry of `id`, if there is one, without making a compact entry
        /// whole.
        func phase(of id: String) -> Entry.Phase? {
            switch position(of: RecordKey(id)) {
            case let position? where position >= 0: return full[Int(position)]!.phase
            case let position?:
                let entry = compact[~Int(position)]
                return entry.isReady ? .ready : .scheduled(entry.timerToken)
            case nil: return nil
            }
        }

        /// The type identifier of the record of `key`, if the table holds it, without making
        /// a compact entry whole.
        func typeIdentifier(of key: RecordKey) -> String? {
            switch position(of: key) {
            case let position? where position >= 0: return full[Int(position)]!.record.typeIdentifier
            case let position?: return types[compact[~Int(position)].record.type]
            case nil: return nil
            }
        }

        /// Adds `entry` under the canonical identifier `uuid`, with one lookup, unless the
        /// table holds an entry of `uuid` already; returns where it put it (a hint for
        /// ``readyIfBeingScheduled(_:hint:)``), or nil when it did not add it.
        mutating func insertCompact(_ entry: Entry.Compact, uuid: UUIDBits) -> Int32? {
            let index = Int32(compact.count)
            guard positions.insert(~index, of: uuid, keys: positionKeys) else { return nil }
            compact.append(entry)
            compactIDs.append(uuid)
            return index
        }

        /// The ordinal compact entries hold for the type identifier `typeIdentifier` (see
        /// ``insertCompact(_:uuid:)``).
        mutating func typeOrdinal(of typeIdentifier: String) -> UInt32 {
            types.ordinal(of: typeIdentifier)
        }

        /// Looks at up to `budget` whole entries from position `start` on (going round to the
        /// first), calls `release` on each that `isReleased` picks, in place with its
        /// identifier, and holds it compact when it then has nothing but its record. Returns the
        /// position to go on from next time.
        mutating func sweepWholeEntries(
            from start: Int, budget: Int, isReleased: (Entry) -> Bool, release: (inout Entry, String) -> Void
        ) -> Int {
            var index = start
            var looked = 0
            while looked < budget, !full.isEmpty {
                if index >= full.count { index = 0 }
                looked += 1
                guard isReleased(full[index]!) else {
                    index += 1
                    continue
                }
                let wholeCount = full.count
                release(&full[index]!, fullIDs[index])
                settleFull(at: index, key: RecordKey(fullIDs[index]))
                // Made compact: the last whole entry moved into `index`, to be looked at next.
                if full.count == wholeCount { index += 1 }
            }
            return index
        }

        /// Makes the entry of `key` ready, when it is held compact and is being scheduled
        /// (``Entry/Phase/scheduled(_:)`` without a timer's call yet), without making it whole;
        /// returns whether it did. (A restore readies a backlog this way, see
        /// `holdRestored(_:from:ended:window:)`.) `hint`: where ``insertCompact(_:uuid:)`` put it;
        /// used without a lookup when the entry is still there (a compact entry moves when
        /// another one is removed).
        mutating func readyIfBeingScheduled(_ key: RecordKey, hint: Int32? = nil) -> Bool {
            let index: Int
            if let hint, case .uuid(let uuid) = key, hint >= 0, Int(hint) < compactIDs.count, compactIDs[Int(hint)] == uuid {
                index = Int(hint)
            } else {
                guard let position = position(of: key), position < 0 else { return false }
                index = ~Int(position)
            }
            // (In place: a copy of the entry would retain and release what it holds.)
            guard !compact[index].isReady, compact[index].timerToken == nil else { return false }
            compact[index].isReady = true
            return true
        }

        /// Runs `body` on the entry of `id` in place, if there is one; returns what it returns.
        mutating func withEntry<Result>(_ id: String, _ body: (inout Entry) throws -> Result) rethrows -> Result? {
            let key = RecordKey(id)
            guard let position = position(of: key) else { return nil }
            if position >= 0 {
                let index = Int(position)
                defer { settleFull(at: index, key: key) }
                return try body(&full[index]!)
            }
            let index = ~Int(position)
            var entry = self.entry(atCompact: index, id: id)
            defer { settleCompact(at: index, id: id, key: key, entry) }
            return try body(&entry)
        }

        /// Sets the entry of `id`; returns the entry it replaced, if any.
        @discardableResult
        mutating func updateValue(_ entry: Entry, forKey id: String) -> Entry? {
            store(entry, forKey: id, returningReplaced: true)
        }

        /// Sets the entry of `id`, with one lookup; returns the entry it replaced when
        /// `returningReplaced` (else a compact one would be made whole only to be dropped).
        @discardableResult
        private mutating func store(_ entry: Entry, forKey id: String, returningReplaced: Bool = false) -> Entry? {
            let key = RecordKey(id)
            guard let position = position(of: key) else {
                insert(entry, id: id, key: key)
                return nil
            }
            if position >= 0 {
                let index = Int(position)
                let old = returningReplaced ? full[index] : nil
                full[index] = entry
                settleFull(at: index, key: key)
                return old
            }
            let index = ~Int(position)
            let old = returningReplaced ? self.entry(atCompact: index, id: id) : nil
            settleCompact(at: index, id: id, key: key, entry)
            return old
        }

        /// Removes the entry of `id`; returns it, if there was one.
        @discardableResult
        mutating func removeValue(forKey id: String) -> Entry? {
            let key = RecordKey(id)
            guard let position = position(of: key) else { return nil }
            if position >= 0 {
                let index = Int(position)
                let entry = full[index]
                removeFull(at: index, key: key)
                return entry
            }
            let index = ~Int(position)
            let entry = self.entry(atCompact: index, id: id)
            removeCompact(at: index)
            return entry
        }

        /// Makes room for `capacity` entries in all, expected to wait their turn (compact).
        mutating func reserveCapacity(_ capacity: Int) {
            positions.reserveCapacity(capacity, keys: positionKeys)
            compact.reserveCapacity(capacity)
            compactIDs.reserveCapacity(capacity)
        }

        // MARK: Positions

        /// The UUIDs of the entries by position, for ``positions``.
        private var positionKeys: PositionIndex.Keys { PositionIndex.Keys(full: fullKeys, compact: compactIDs) }

        private func position(of key: RecordKey) -> Int32? {
            switch key {
            case .uuid(let uuid): positions.position(of: uuid, keys: positionKeys)
            case .text(let text): textPositions[text]
            }
        }

        /// Adds the position of `key`, which the table does not hold yet.
        private mutating func addPosition(_ position: Int32, of key: RecordKey) {
            switch key {
            case .uuid(let uuid): positions.insert(position, of: uuid, keys: positionKeys)
            case .text(let text): textPositions[text] = position
            }
        }

        /// Removes the position of `key`, while its entry is still where it was.
        private mutating func removePosition(of key: RecordKey) {
            switch key {
            case .uuid(let uuid): positions.remove(uuid, keys: positionKeys)
            case .text(let text): textPositions[text] = nil
            }
        }

        /// The compact entry at `index` made whole, with the identifier `id`.
        private func entry(atCompact index: Int, id: String) -> Entry {
            let entry = compact[index]
            return entry.entry(id: id, typeIdentifier: types[entry.record.type])
        }

        /// The compact form of `entry`, stored under `id`, when it has one: its identifier
        /// must be the record's own, in canonical form (held as a UUID).
        private mutating func compacted(_ entry: Entry, id: String, key: RecordKey) -> (Entry.Compact, UUIDBits)? {
            guard case .uuid(let uuid) = key, entry.record.id == id,
                  let compact = entry.compacted(type: types.ordinal(of: entry.record.typeIdentifier))
            else { return nil }
            return (compact, uuid)
        }

        private mutating func insert(_ entry: Entry, id: String, key: RecordKey) {
            if let (compacted, uuid) = compacted(entry, id: id, key: key) {
                appendCompact(compacted, uuid: uuid)
            } else {
                appendFull(entry, id: id, key: key)
            }
        }

        /// After the whole entry at `index` changed: removed if set to `nil`, made compact if
        /// it now only waits its turn.
        private mutating func settleFull(at index: Int, key: RecordKey) {
            guard let entry = full[index] else {
                removeFull(at: index, key: key)
                return
            }
            if let (compacted, uuid) = compacted(entry, id: fullIDs[index], key: key) {
                removeFull(at: index, key: key)
                appendCompact(compacted, uuid: uuid)
            }
        }

        /// After the compact entry at `index` was read whole as `entry` and changed: removed,
        /// stored compact again, or stored whole.
        private mutating func settleCompact(at index: Int, id: String, key: RecordKey, _ entry: Entry?) {
            guard let entry else {
                removeCompact(at: index)
                return
            }
            if let (compacted, _) = compacted(entry, id: id, key: key) {
                compact[index] = compacted
            } else {
                removeCompact(at: index)
                appendFull(entry, id: id, key: key)
            }
        }

        private mutating func appendFull(_ entry: Entry, id: String, key: RecordKey) {
            addPosition(Int32(full.count), of: key)
            full.append(entry)
            fullIDs.append(id)
            if case .uuid(let uuid) = key { fullKeys.append(uuid) } else { fullKeys.append(UUIDBits(high: 0, low: 0)) }
        }

        private mutating func appendCompact(_ entry: Entry.Compact, uuid: UUIDBits) {
            positions.insert(~Int32(compact.count), of: uuid, keys: positionKeys)
            compact.append(entry)
            compactIDs.append(uuid)
        }

        /// Removes the whole entry at `index`, whose key is `key`: the last whole entry moves
        /// into its place. (The positions change first, while every entry is where they say.)
        private mutating func removeFull(at index: Int, key: RecordKey) {
            removePosition(of: key)
            let last = full.count - 1
            if index != last {
                switch RecordKey(fullIDs[last]) {
                case .uuid(let uuid): positions.move(uuid, from: Int32(last), to: Int32(index))
                case .text(let text): textPositions[text] = Int32(index)
                }
                full.swapAt(index, last)
                fullIDs.swapAt(index, last)
                fullKeys.swapAt(index, last)
            }
            full.removeLast()
            fullIDs.removeLast()
            fullKeys.removeLast()
        }

        /// Removes the compact entry at `index`: the last compact entry moves into its place.
        private mutating func removeCompact(at index: Int) {
            positions.remove(compactIDs[index], keys: positionKeys)
            let last = compact.count - 1
            if index != last {
                positions.move(compactIDs[last], from: ~Int32(last), to: ~Int32(index))
                compact.swapAt(index, last)
                compactIDs.swapAt(index, last)
            }
            compact.removeLast()
            compactIDs.removeLast()
        }

        // MARK: Iteration

        /// How many entries hold a record whose tags and lane `isIncluded` takes, each read in
        /// place: no compact entry is made whole (a million in milliseconds, where iterating
        /// ``values`` takes about a second).
        func count(where isIncluded: (_ tags: [String], _ lane: String?) -> Bool) -> Int {
            var count = 0
            for entry in full where entry.map({ isIncluded($0.record.tags, $0.record.lane) }) == true { count += 1 }
            for entry in compact where isIncluded(entry.record.tags, entry.record.lane) { count += 1 }
            return count
        }

        func makeIterator() -> Iterator {
            Iterator(full: full, fullIDs: fullIDs, compact: compact, compactIDs: compactIDs, types: types)
        }

        /// The entries and their identifiers: the whole ones, then the compact ones made whole.
        struct Iterator: IteratorProtocol {
            fileprivate let full: [Entry?]
            fileprivate let fullIDs: [String]
            fileprivate let compact: [Entry.Compact]
            fileprivate let compactIDs: [UUIDBits]
            fileprivate let types: TypeIdentifiers
            private var position = 0

            fileprivate init(full: [Entry?], fullIDs: [String], compact: [Entry.Compact], compactIDs: [UUIDBits], types: TypeIdentifiers) {
                self.full = full
                self.fullIDs = fullIDs
                self.compact = compact
                self.compactIDs = compactIDs
                self.types = types
            }

            mutating func next() -> (key: String, value: Entry)? {
                let index = position
                if index < full.count {
                    position += 1
                    return (fullIDs[index], full[index]!)
                }
                guard index - full.count < compact.count else { return nil }
                position += 1
                let id = RecordIdentifier.string(of: compactIDs[index - full.count])
                let entry = compact[index - full.count]
                return (id, entry.entry(id: id, typeIdentifier: types[entry.record.type]))
            }
        }

        /// The entries, without their identifiers (see ``values``).
        struct Values: Sequence {
            fileprivate let table: EntryTable
            var underestimatedCount: Int { table.count }

            func makeIterator() -> ValuesIterator { ValuesIterator(base: table.makeIterator()) }
        }

        struct ValuesIterator: IteratorProtocol {
            fileprivate var base: Iterator
            mutating func next() -> Entry? { base.next()?.value }
        }
    }
}

extension PersistentOperationQueue {
    /// The type identifiers of an ``EntryTable``'s compact entries, each once, by ordinal: a
    /// compact entry holds 4 bytes for its type instead of a 16-byte `String`. Ordinals are
    /// never reused (a queue registers few types; a type no entry holds any more keeps its).
    struct TypeIdentifiers: Sendable {
        private var names: [String] = []
        private var ordinals: [String: UInt32] = [:]
        /// The latest identifier looked up and its ordinal: most backlogs are of one type or
        /// a few, so most lookups end here without hashing the identifier.
        private var latest: (name: String, ordinal: UInt32)?

        /// The identifier of `ordinal`.
        subscript(ordinal: UInt32) -> String { names[Int(ordinal)] }

        /// The ordinal of `name`, given one now if it has none.
        mutating func ordinal(of name: String) -> UInt32 {
            if let latest, latest.name == name { return latest.ordinal }
            let ordinal: UInt32
            if let known = ordinals[name] {
                ordinal = known
            } else {
                precondition(names.count < Int(UInt32.max), "too many type identifiers")
                ordinal = UInt32(names.count)
                names.append(name)
                ordinals[name] = ordinal
            }
            latest = (name, ordinal)
            return ordinal
        }
    }
}
