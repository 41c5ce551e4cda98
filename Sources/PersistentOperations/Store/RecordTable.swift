import Foundation

/// A hash table from record identifiers to values, as a `[UUID: Value]` dictionary would hold
/// them, in about half the memory at a million records, and growing a little at a time.
///
/// A dictionary's bucket count is a power of two, at most three quarters full: a million
/// entries take 2²¹ buckets, 2.1 times as many as they need, and each bucket the whole key and
/// value. Here the slot count is any number: the table is at most ``maximumLoad`` full, so a
/// million entries take 1.12 to 1.25 million slots. Slots are found by linear probing from a
/// position the key's hash picks (multiplied into the slot count, so no power of two is needed),
/// and a removal shifts the slots that follow back into place, so no tombstones pile up.
///
/// The table is ``shardCount`` tables, the top bits of the hash picking one. Each grows on its
/// own, by an eighth: growing moves one shard's slots, not every slot (a table that grew whole
/// held its old slots and its new ones at once, and wrote every new one: a jump of 140 MB at a
/// million records), and a table that grows one add at a time holds at most an eighth more
/// slots than it needs. A shard's slots sit in pages of their own once large
/// (``PlainArray``), so the slots it frees as it grows go back to the system.
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
struct RecordTable<Value: Sendable & BitwiseCopyable>: Sendable, Sequence {
    /// The most a shard is filled before it grows: 90 %. (Probing runs get long only past
    /// that; at 80 %, with growth by a quarter, a million records took 7 MB more and opened no
    /// faster.)
    static var maximumLoad: Double { 0.9 }
    /// How many tables the hash spreads the identifiers over.
    static var shardCount: Int { 1 << shardBits }
    fileprivate static var shardBits: Int { 6 }

    fileprivate struct Slot: Sendable, BitwiseCopyable {
        /// The identifier's bytes (`UUID` itself is not declared `BitwiseCopyable`).
        private var bytes: uuid_t
        var value: Value

        init(key: UUID, value: Value) {
            bytes = key.uuid
            self.value = value
        }

        var key: UUID { UUID(uuid: bytes) }
    }

    /// One of the tables: its slots, probed linearly, and how many hold a value.
    fileprivate struct Shard: Sendable {
        /// (Mapped pages once large: the slots a shard frees as it grows go back to the
        /// system, not to holes in the heap.)
        var slots = PlainArray<Slot?>()
        var count = 0
    }

    private var shards = [Shard](repeating: Shard(), count: shardCount)
    private(set) var count = 0
    /// The process's seed, kept here so that hashing does not look up a global each time.
    private let seed = HashSeed.words

    init() {}

    /// The slots the table has (full or empty).
    var slotCount: Int { shards.reduce(0) { $0 + $1.slots.count } }

    /// Whether the table holds no value.
    var isEmpty: Bool { count == 0 }

    /// The identifiers the table holds, in iteration order.
    var keys: [UUID] { map(\.key) }

    /// The value of `key`; setting `nil` removes it.
    subscript(key: UUID) -> Value? {
        get {
            let hash = Self.hash(key, seed: seed)
            let shard = Self.shard(of: hash)
            guard let position = shards[shard].position(of: key, hash: hash) else { return nil }
            return shards[shard].slots[position]?.value
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
        let hash = Self.hash(key, seed: seed)
        let shard = Self.shard(of: hash)
        let old = shards[shard].update(value, forKey: key, hash: hash, seed: seed)
        if old == nil { count += 1 }
        return old
    }

    /// Removes the value of `key`; returns it, if there was one.
    @discardableResult
    mutating func removeValue(forKey key: UUID) -> Value? {
        let hash = Self.hash(key, seed: seed)
        let removed = shards[Self.shard(of: hash)].remove(key, hash: hash, seed: seed)
        if removed != nil { count -= 1 }
        return removed
    }

    /// Makes room for `capacity` values in all without growing again (as the hash spreads
    /// them: each shard gets its share and some).
    mutating func reserveCapacity(_ capacity: Int) {
        let share = Double(capacity) / Double(Self.shardCount)
        // (A shard's share varies by about its square root: one in forty shards, more than
        // twice that, grows once.)
        let perShard = Int((share + 2 * share.squareRoot()).rounded(.up))
        for index in shards.indices {
            shards[index].reserve(perShard, seed: seed)
        }
    }

    /// Moves the values of each shard with a sixteenth more slots than they need into the
    /// slots they need (its old slots are freed once moved: one shard at a time).
    mutating func shrinkIfSparse() {
        for index in shards.indices {
            let needed = Shard.slotCount(for: shards[index].count)
            if shards[index].slots.count > needed + needed / 16 { shards[index].resize(to: needed, seed: seed) }
        }
    }

    func makeIterator() -> Iterator {
        Iterator(shards: shards)
    }

    struct Iterator: IteratorProtocol {
        fileprivate let shards: [Shard]
        fileprivate var shard = 0
        fileprivate var slots = PlainArray<Slot?>()
        fileprivate var position = 0

        fileprivate init(shards: [Shard]) {
            self.shards = shards
            slots = shards.first?.slots ?? PlainArray()
        }

        mutating func next() -> (key: UUID, value: Value)? {
            while true {
                while position < slots.count {
                    defer { position += 1 }
                    if let slot = slots[position] { return (slot.key, slot.value) }
                }
                shard += 1
                guard shard < shards.count else { return nil }
                slots = shards[shard].slots
                position = 0
            }
        }
    }

    // MARK: Hashing

    /// The shard of the identifier whose hash is `hash`: its top bits.
    private static func shard(of hash: UInt64) -> Int {
        Int(truncatingIfNeeded: hash >> (64 - UInt64(shardBits)))
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

extension RecordTable.Shard {
    typealias Table = RecordTable<Value>

    /// The slots that hold `capacity` values at most ``RecordTable/maximumLoad`` full.
    static func slotCount(for capacity: Int) -> Int {
        Swift.max(8, Int((Double(capacity) / Table.maximumLoad).rounded(.up)) + 1)
    }

    func position(of key: UUID, hash: UInt64) -> Int? {
        guard count > 0 else { return nil }
        var position = home(of: hash)
        while let slot = slots[position] {
            if slot.key == key { return position }
            position = next(position)
        }
        return nil
    }

    mutating func update(_ value: Value, forKey key: UUID, hash: UInt64, seed: (UInt64, UInt64, UInt64)) -> Value? {
        if let position = position(of: key, hash: hash) {
            let old = slots[position]?.value
            slots[position]?.value = value
            return old
        }
        if Double(count + 1) > Double(slots.count) * Table.maximumLoad {
            // By an eighth: a shard that grows one add at a time never holds much more than it
            // needs, and the others do not move.
            resize(to: Self.slotCount(for: Swift.max(count + 1, count + count / 8)), seed: seed)
        }
        var position = home(of: hash)
        while slots[position] != nil {
            position = next(position)
        }
        slots[position] = Table.Slot(key: key, value: value)
        count += 1
        return nil
    }

    mutating func remove(_ key: UUID, hash: UInt64, seed: (UInt64, UInt64, UInt64)) -> Value? {
        guard var hole = position(of: key, hash: hash) else { return nil }
        let removed = slots[hole]?.value
        slots[hole] = nil
        count -= 1
        // Backward shift: each slot of the run after the hole that may sit in it (its home is
        // not strictly between the hole and it, cyclically) moves there, leaving a new hole.
        var position = next(hole)
        while let slot = slots[position] {
            let home = home(of: Table.hash(slot.key, seed: seed))
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

    mutating func reserve(_ capacity: Int, seed: (UInt64, UInt64, UInt64)) {
        let needed = Self.slotCount(for: capacity)
        if needed > slots.count { resize(to: needed, seed: seed) }
    }

    mutating func resize(to slotCount: Int, seed: (UInt64, UInt64, UInt64)) {
        let old = slots
        slots = PlainArray(repeating: Optional<Table.Slot>.none, count: slotCount)
        for case let slot? in old {
            var position = home(of: Table.hash(slot.key, seed: seed))
            while slots[position] != nil {
                position = next(position)
            }
            slots[position] = slot
        }
    }

    private func next(_ position: Int) -> Int {
        position + 1 == slots.count ? 0 : position + 1
    }

    /// Where probing starts for an identifier whose hash is `hash`: the bits below the
    /// shard's, scaled into the slot count.
    private func home(of hash: UInt64) -> Int {
        Int(truncatingIfNeeded: (hash << UInt64(Table.shardBits)).multipliedFullWidth(by: UInt64(slots.count)).high)
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
