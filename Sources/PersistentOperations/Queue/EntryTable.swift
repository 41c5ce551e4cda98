import Foundation

extension PersistentOperationQueue {
    /// The queue's entries by record identifier, as a dictionary would hold them, in less
    /// memory: the entries sit in one array, and a dictionary maps each identifier to its
    /// position.
    ///
    /// An entry is large (about 460 bytes: its record, its phase and its bookkeeping). A
    /// dictionary of entries keeps each one in its hash table, whose slots number a power of
    /// two at most three quarters full: at 100,000 entries that is 262,144 slots of 480 bytes,
    /// 126 MB. Here only the small position table pays for the empty slots; the entries take
    /// their own size each. Removing an entry moves the last one into its place, so the order
    /// of iteration is no order at all, as a dictionary's.
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
        private var positions: [String: Int] = [:]
        private var identifiers: [String] = []
        /// The entries, never `nil` between calls: optional so that an entry can be changed in
        /// place, through the array's own element access (see the subscript's `_modify`).
        private var storage: [Entry?] = []

        /// How many entries the table holds.
        var count: Int { storage.count }
        /// Whether the table holds no entry.
        var isEmpty: Bool { storage.isEmpty }
        /// The identifiers of the entries, in the order of ``values``.
        var keys: [String] { identifiers }
        /// The entries, in the order of ``keys``: a view of the table, not a copy of its
        /// entries (a million of them take 240 MB).
        var values: LazyMapSequence<[Entry?], Entry> { storage.lazy.map { $0! } }

        /// An entry of the table, as a dictionary's `first`: no particular one.
        var first: (key: String, value: Entry)? {
            storage.isEmpty ? nil : (identifiers[0], storage[0]!)
        }

        /// The entry of `id`; setting `nil` removes it. Changing a field of an entry
        /// (`table[id]?.kills += 1`) changes it in place: the entry is not copied out and
        /// back, nor its identifier hashed twice.
        subscript(id: String) -> Entry? {
            // Read in place: `table[id]?.phase` copies the phase, not the entry.
            _read {
                if let position = positions[id] {
                    yield storage[position]
                } else {
                    yield nil
                }
            }
            set {
                if let newValue {
                    updateValue(newValue, forKey: id)
                } else {
                    removeValue(forKey: id)
                }
            }
            _modify {
                guard let position = positions[id] else {
                    var added: Entry?
                    defer {
                        if let added { append(added, forKey: id) }
                    }
                    yield &added
                    return
                }
                defer {
                    // Set to `nil`: removed.
                    if storage[position] == nil { removeHole(at: position) }
                }
                yield &storage[position]
            }
        }

        /// Runs `body` on the entry of `id` in place, if there is one; returns what it returns.
        mutating func withEntry<Result>(_ id: String, _ body: (inout Entry) throws -> Result) rethrows -> Result? {
            guard let position = positions[id] else { return nil }
            return try body(&storage[position]!)
        }

        /// Sets the entry of `id`; returns the entry it replaced, if any.
        @discardableResult
        mutating func updateValue(_ entry: consuming Entry, forKey id: String) -> Entry? {
            // One hashing of the identifier for an entry added (the common case).
            if let position = positions.updateValue(storage.count, forKey: id) {
                positions[id] = position
                let old = storage[position]
                storage[position] = entry
                return old
            }
            identifiers.append(id)
            storage.append(entry)
            return nil
        }

        /// Adds the entry of `id`, which the table does not hold.
        private mutating func append(_ entry: Entry, forKey id: String) {
            positions[id] = storage.count
            identifiers.append(id)
            storage.append(entry)
        }

        /// Removes the entry of `id`; returns it, if there was one.
        @discardableResult
        mutating func removeValue(forKey id: String) -> Entry? {
            guard let position = positions[id] else { return nil }
            let entry = storage[position]
            storage[position] = nil
            removeHole(at: position)
            return entry
        }

        /// Removes the slot at `position`, whose entry was set to `nil`: the last entry moves
        /// into its place.
        private mutating func removeHole(at position: Int) {
            positions[identifiers[position]] = nil
            let last = storage.count - 1
            if position != last {
                storage.swapAt(position, last)
                identifiers.swapAt(position, last)
                positions[identifiers[position]] = position
            }
            identifiers.removeLast()
            storage.removeLast()
        }

        /// Makes room for `capacity` entries in all.
        mutating func reserveCapacity(_ capacity: Int) {
            positions.reserveCapacity(capacity)
            identifiers.reserveCapacity(capacity)
            storage.reserveCapacity(capacity)
        }

        func makeIterator() -> Iterator {
            Iterator(identifiers: identifiers, storage: storage)
        }

        struct Iterator: IteratorProtocol {
            let identifiers: [String]
            let storage: [Entry?]
            var position = 0

            mutating func next() -> (key: String, value: Entry)? {
                guard position < storage.count else { return nil }
                defer { position += 1 }
                return (identifiers[position], storage[position]!)
            }
        }
    }
}
