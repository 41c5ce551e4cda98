import Foundation

/// A hash table from record identifiers to values, as a `[UUID: Value]` dictionary would hold
/// them, in about half the memory at a million records.
///
/// A dictionary's bucket count is a power of two, at most three quarters full: a million
/// entries take 2²¹ buckets, 2.1 times as many as they need, and each bucket the whole key and
/// value. Here the slot count is any number: the table is at most ``maximumLoad`` full, so a
/// million entries take 1.25 million slots. Slots are found by linear probing from a position
/// the key's hash picks (multiplied into the slot count, so no power of two is needed), and a
/// removal shifts the slots that follow back into place, so no tombstones pile up.
///
/// The hash mixes both halves of the identifier with a seed chosen at random once per process,
/// so identifiers read from a file that someone crafted cannot be made to collide.
///
/// Iteration visits the slots in order: no particular order, as a dictionary's.
///
/// ```swift
/// var table = RecordTable<Int>()
/// let id = UUID()
/// table[id] = 1                      // add or replace
/// table.updateValue(2, forKey: id)   // the value replaced: 1
/// for (id, value) in table { print(id, value) }
/// table.removeValue(forKey: id)      // the value removed: 2
/// ```
struct RecordTable<Value: Sendable>: Sendable, Sequence {
    /// The most a table is filled before it grows: 80 %.
    static var maximumLoad: Double { 0.8 }

    fileprivate struct Slot: Sendable {
        var key: UUID
        var value: Value
    }

    private var slots: [Slot?] = []
    private(set) var count = 0
    /// The process's seed, kept here so that hashing does not look up a global each time.
    private let seed = HashSeed.words

    init() {}

    /// The slots the table has (full or empty).
    var slotCount: Int { slots.count }

    /// Whether the table holds no value.
    var isEmpty: Bool { count == 0 }

    /// The identifiers the table holds, in iteration order.
    var keys: [UUID] { map(\.key) }

    /// The value of `key`; setting `nil` removes it.
    subscript(key: UUID) -> Value? {
        get {
            guard let position = position(of: key) else { return nil }
            return slots[position]?.value
        }
        set {
            if let newValue {
                updateValue(newValue, forKey: key)
            } else {
                removeValue(forKey: key)
            }
        }
    }

    /// Sets the value of `key`; returns the value it replaced, if any.
    @discardableResult
    mutating func updateValue(_ value: Value, forKey key: UUID) -> Value? {
        if let position = position(of: key) {
            let old = slots[position]?.value
            slots[position]?.value = value
            return old
        }
        if Double(count + 1) > Double(slots.count) * Self.maximumLoad {
            // By half again: a table that grows one add at a time never holds twice what it needs.
            resize(to: Self.slotCount(for: Swift.max(count + 1, count + count / 2)))
        }
        var position = home(of: key)
        while slots[position] != nil {
            position = next(position)
        }
        slots[position] = Slot(key: key, value: value)
        count += 1
        return nil
    }

    /// Removes the value of `key`; returns it, if there was one.
    @discardableResult
    mutating func removeValue(forKey key: UUID) -> Value? {
        guard var hole = position(of: key) else { return nil }
        let removed = slots[hole]?.value
        slots[hole] = nil
        count -= 1
        // Backward shift: each slot of the run after the hole that may sit in it (its home is
        // not strictly between the hole and it, cyclically) moves there, leaving a new hole.
        var position = next(hole)
        while let slot = slots[position] {
            let home = home(of: slot.key)
            let distanceFromHome = (position - home + slots.count) % slots.count
            let distanceToHole = (position - hole + slots.count) % slots.count
            if distanceFromHome >= distanceToHole {
                slots[hole] = slot
                slots[position] = nil
                hole = position
            }
            position = next(position)
        }
        return removed
    }

    /// Makes room for `capacity` values in all without growing again.
    mutating func reserveCapacity(_ capacity: Int) {
        let needed = Self.slotCount(for: capacity)
        if needed > slots.count { resize(to: needed) }
    }

    /// Moves the values into a table of the slots they need when it has a quarter more
    /// (the old slots are freed once moved).
    mutating func shrinkIfSparse() {
        let needed = Self.slotCount(for: count)
        if slots.count > needed + needed / 4 { resize(to: needed) }
    }

    func makeIterator() -> Iterator {
        Iterator(slots: slots)
    }

    struct Iterator: IteratorProtocol {
        fileprivate let slots: [Slot?]
        fileprivate var position = 0

        mutating func next() -> (key: UUID, value: Value)? {
            while position < slots.count {
                defer { position += 1 }
                if let slot = slots[position] { return (slot.key, slot.value) }
            }
            return nil
        }
    }

    // MARK: Probing

    private func position(of key: UUID) -> Int? {
        guard count > 0 else { return nil }
        var position = home(of: key)
        while let slot = slots[position] {
            if slot.key == key { return position }
            position = next(position)
        }
        return nil
    }

    private func next(_ position: Int) -> Int {
        position + 1 == slots.count ? 0 : position + 1
    }

    /// Where probing for `key` starts: its hash scaled into the slot count.
    private func home(of key: UUID) -> Int {
        Int(truncatingIfNeeded: Self.hash(key, seed: seed).multipliedFullWidth(by: UInt64(slots.count)).high)
    }

    private mutating func resize(to slotCount: Int) {
        let old = slots
        slots = Array(repeating: nil, count: slotCount)
        for case let slot? in old {
            var position = home(of: slot.key)
            while slots[position] != nil {
                position = next(position)
            }
            slots[position] = slot
        }
    }

    /// The slots that hold `capacity` values at most ``maximumLoad`` full.
    private static func slotCount(for capacity: Int) -> Int {
        Swift.max(8, Int((Double(capacity) / maximumLoad).rounded(.up)) + 1)
    }

    /// A 64-bit hash of the identifier's 128 bits, keyed by the process's seed (the 128-bit
    /// product of the two halves, each mixed with a seed word, folded: as wyhash mixes).
    static func hash(_ key: UUID, seed: (UInt64, UInt64, UInt64) = HashSeed.words) -> UInt64 {
        let (low, high) = withUnsafeBytes(of: key.uuid) { raw in
            (raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        }
        return HashSeed.hash(low, high, seed: seed)
    }
}

/// The seed of ``RecordTable``'s hash (and the queue's index of entry positions), drawn once
/// per process from the system's random source, and the hash it keys.
enum HashSeed {
    /// A 64-bit hash of the 128 bits `first` and `second`, keyed by `seed`: the 128-bit product
    /// of the two halves, each mixed with a seed word, folded (as wyhash mixes).
    static func hash(_ first: UInt64, _ second: UInt64, seed: (UInt64, UInt64, UInt64)) -> UInt64 {
        let product = (first ^ seed.0).multipliedFullWidth(by: second ^ seed.1)
        let folded = product.high ^ product.low
        let mixed = (folded ^ seed.2).multipliedFullWidth(by: 0x9E37_79B9_7F4A_7C15)
        return mixed.high ^ mixed.low
    }

    static let words: (UInt64, UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        // Odd words: a product with an odd factor loses no bits of the other.
        return (generator.next() | 1, generator.next() | 1, generator.next())
    }()
}
