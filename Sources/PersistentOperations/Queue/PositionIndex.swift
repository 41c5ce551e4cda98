import Foundation

extension PersistentOperationQueue {
    /// Where the entries of canonical identifiers sit in an ``EntryTable``, found by their
    /// UUIDs: an open-addressing hash table that holds the positions, a byte of each UUID's
    /// hash and each slot's distance from where its probe starts, 6 bytes a slot.
    ///
    /// The table's own arrays already hold each entry's UUID, so a slot need not: a lookup
    /// compares the UUID of the entry at each position it probes (``Keys``), but only where the
    /// slot's hash byte matches, since each comparison reads an entry far away in memory (a
    /// slot's byte saves a restore of a million records about seven such reads an entry). A
    /// dictionary of UUIDs to positions takes 2²¹ slots of 20 bytes for a million entries
    /// (42 MB); this takes 1.25 million slots of 6 (7.5 MB). Probing is linear from a position
    /// the UUID's seeded hash picks (as ``RecordTable``'s, so that identifiers read from a
    /// crafted file cannot be made to collide), and a removal shifts the slots that follow back
    /// into place, each by the distance its slot keeps (a distance of 255 or more is worked out
    /// from the UUID): a removal reads no entry far away besides its own.
    ///
    /// ```swift
    /// var index = PersistentOperationQueue.PositionIndex()
    /// let uuid = UUIDBits(high: 1, low: 2)
    /// let keys = PersistentOperationQueue.PositionIndex.Keys(full: [], compact: [uuid])
    /// index.insert(~0, of: uuid, keys: keys)                     // the compact entry at 0
    /// let found = index.position(of: uuid, keys: keys)           // ~0
    /// index.remove(uuid, keys: keys)
    /// ```
    struct PositionIndex: Sendable {
        /// The UUIDs of the entries, by position: whole entries at 0, 1, …; compact ones at
        /// -1, -2, … (`~index`).
        struct Keys {
            let full: [UUIDBits]
            let compact: [UUIDBits]

            subscript(position: Int32) -> UUIDBits {
                position >= 0 ? full[Int(position)] : compact[~Int(position)]
            }
        }

        /// The most a table is filled before it grows: 80 %.
        static let maximumLoad = 0.8
        /// A slot that holds no position.
        private static let empty = Int32.min

        private var slots: [Int32] = []
        /// The low byte of the hash of the UUID at each full slot.
        private var tags: [UInt8] = []
        /// How far each full slot is from its UUID's home slot, at most ``farDistance`` (from
        /// there on, worked out from the UUID).
        private var distances: [UInt8] = []
        /// The distance from which a slot's is worked out from its UUID: 255, or less to test
        /// that path.
        private let farDistance: Int

        /// An empty index; `farDistance` below 255 only for tests.
        init(farDistance: Int = 255) {
            precondition(farDistance >= 1 && farDistance <= 255, "farDistance out of range")
            self.farDistance = farDistance
        }
        private(set) var count = 0
        /// The process's seed, kept here so that hashing does not look up a global each time.
        private let seed = HashSeed.words

        /// The position of `uuid`, if the index holds it.
        func position(of uuid: UUIDBits, keys: Keys) -> Int32? {
            slot(of: uuid, keys: keys).map { slots[$0] }
        }

        /// Adds `position` for `uuid`, with one probe; returns false, adding nothing, when the
        /// index holds `uuid` already. (`keys` need not hold `uuid` yet: only the positions
        /// already in the index are looked at.)
        @discardableResult
        mutating func insert(_ position: Int32, of uuid: UUIDBits, keys: Keys) -> Bool {
            precondition(position != Self.empty, "position out of range")
            if Double(count + 1) > Double(slots.count) * Self.maximumLoad {
                // By half again: a table that grows one add at a time never holds twice what it needs.
                resize(to: Self.slotCount(for: Swift.max(count + 1, count + count / 2)), keys: keys)
            }
            let hash = Self.hash(uuid, seed: seed)
            let tag = Self.tag(of: hash)
            var slot = home(of: hash)
            var distance = 0
            while slots[slot] != Self.empty {
                if tags[slot] == tag, keys[slots[slot]] == uuid { return false }
                slot = next(slot)
                distance += 1
            }
            slots[slot] = position
            tags[slot] = tag
            distances[slot] = UInt8(Swift.min(distance, farDistance))
            count += 1
            return true
        }

        /// Changes the position `uuid` has from `old` to `new`, before the entry moves there
        /// (its slot is found by the position it holds, not by the UUID at it).
        mutating func move(_ uuid: UUIDBits, from old: Int32, to new: Int32) {
            guard count > 0 else { return }
            var slot = home(of: Self.hash(uuid, seed: seed))
            while slots[slot] != Self.empty {
                if slots[slot] == old {
                    slots[slot] = new
                    return
                }
                slot = next(slot)
            }
        }

        /// Removes `uuid`; returns the position it had, if the index held it.
        @discardableResult
        mutating func remove(_ uuid: UUIDBits, keys: Keys) -> Int32? {
            guard var hole = slot(of: uuid, keys: keys) else { return nil }
            let removed = slots[hole]
            slots[hole] = Self.empty
            count -= 1
            // Backward shift: each slot of the run after the hole that may sit in it (its home is
            // not strictly between the hole and it, cyclically) moves there, leaving a new hole.
            var slot = next(hole)
            var distanceToHole = 1
            while slots[slot] != Self.empty {
                var distanceFromHome = Int(distances[slot])
                if distanceFromHome == farDistance {
                    let home = home(of: Self.hash(keys[slots[slot]], seed: seed))
                    distanceFromHome = (slot - home + slots.count) % slots.count
                }
                if distanceFromHome >= distanceToHole {
                    slots[hole] = slots[slot]
                    tags[hole] = tags[slot]
                    distances[hole] = UInt8(Swift.min(distanceFromHome - distanceToHole, farDistance))
                    slots[slot] = Self.empty
                    hole = slot
                    distanceToHole = 0
                }
                slot = next(slot)
                distanceToHole += 1
            }
            return removed
        }

        /// Makes room for `capacity` positions in all without growing again.
        mutating func reserveCapacity(_ capacity: Int, keys: Keys) {
            let needed = Self.slotCount(for: capacity)
            if needed > slots.count { resize(to: needed, keys: keys) }
        }

        // MARK: Probing

        private func slot(of uuid: UUIDBits, keys: Keys) -> Int? {
            guard count > 0 else { return nil }
            let hash = Self.hash(uuid, seed: seed)
            let tag = Self.tag(of: hash)
            var slot = home(of: hash)
            while slots[slot] != Self.empty {
                if tags[slot] == tag, keys[slots[slot]] == uuid { return slot }
                slot = next(slot)
            }
            return nil
        }

        private func next(_ slot: Int) -> Int {
            slot + 1 == slots.count ? 0 : slot + 1
        }

        /// Where probing for a UUID whose hash is `hash` starts: the hash scaled into the slot
        /// count (its high bits pick the slot).
        private func home(of hash: UInt64) -> Int {
            Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(slots.count)).high)
        }

        /// The byte a slot keeps of the hash `hash`: its lowest, which `home(of:)` hardly uses.
        private static func tag(of hash: UInt64) -> UInt8 {
            UInt8(truncatingIfNeeded: hash)
        }

        private mutating func resize(to slotCount: Int, keys: Keys) {
            let old = slots
            slots = Array(repeating: Self.empty, count: slotCount)
            tags = Array(repeating: 0, count: slotCount)
            distances = Array(repeating: 0, count: slotCount)
            for position in old where position != Self.empty {
                let hash = Self.hash(keys[position], seed: seed)
                var slot = home(of: hash)
                var distance = 0
                while slots[slot] != Self.empty {
                    slot = next(slot)
                    distance += 1
                }
                slots[slot] = position
                tags[slot] = Self.tag(of: hash)
                distances[slot] = UInt8(Swift.min(distance, farDistance))
            }
        }

        /// The slots that hold `capacity` positions at most ``maximumLoad`` full.
        private static func slotCount(for capacity: Int) -> Int {
            Swift.max(8, Int((Double(capacity) / maximumLoad).rounded(.up)) + 1)
        }

        /// A 64-bit hash of the UUID's 128 bits keyed by the process's seed, as
        /// ``RecordTable`` hashes them.
        static func hash(_ uuid: UUIDBits, seed: (UInt64, UInt64, UInt64)) -> UInt64 {
            HashSeed.hash(uuid.low, uuid.high, seed: seed)
        }
    }
}
