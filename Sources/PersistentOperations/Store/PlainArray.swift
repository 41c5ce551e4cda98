import Foundation

/// A fixed-size array of plain values (no references) whose storage, from 64 KiB on, sits in
/// pages mapped for it alone and is unmapped when freed, instead of in the heap.
///
/// A hash table that grows in steps frees its old slots each time. In the heap, those freed
/// blocks stay with the process: the shards of the journal's index, growing one add at a time
/// to a million records, left 61 MB of holes the heap kept (a process that added a million held
/// 292 MB, 219 MB of it in use). Pages of its own go back to the system the moment a table is
/// freed. Smaller arrays are allocated as usual: a page each would waste more than it saves.
///
/// Copies share the storage until one of them changes an element (copy on write), as an
/// `Array`'s do.
///
/// ```swift
/// var slots = PlainArray<Int32>(repeating: -1, count: 100_000)   // 400 KB: mapped pages
/// slots[7] = 3
/// let copy = slots                   // shares the pages
/// slots[8] = 4                       // copies them first
/// print(copy[8], slots[8], slots.count)   // -1 4 100000
/// ```
struct PlainArray<Element: BitwiseCopyable & Sendable>: RandomAccessCollection, MutableCollection, Sendable {
    /// The size from which storage is mapped pages of its own.
    static var mappedFromBytes: Int { 64 << 10 }

    private var storage: Storage

    /// No elements.
    init() {
        storage = Storage(count: 0)
    }

    /// `count` elements, each `value`.
    init(repeating value: Element, count: Int) {
        storage = Storage(count: count)
        storage.elements.initialize(repeating: value, count: count)
    }

    var startIndex: Int { 0 }
    var endIndex: Int { storage.count }

    /// Whether the storage is mapped pages of its own (rather than heap memory).
    var isMapped: Bool { storage.isMapped }

    subscript(position: Int) -> Element {
        get {
            precondition(position >= 0 && position < storage.count, "index out of range")
            return storage.elements[position]
        }
        set {
            precondition(position >= 0 && position < storage.count, "index out of range")
            makeUnique()
            storage.elements[position] = newValue
        }
        _modify {
            precondition(position >= 0 && position < storage.count, "index out of range")
            makeUnique()
            yield &storage.elements[position]
        }
    }

    private mutating func makeUnique() {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
    }

    /// The elements' memory, owned by this class: mapped pages or heap memory.
    private final class Storage: @unchecked Sendable {
        // (@unchecked: the elements are changed only through a `PlainArray` that holds the
        // one reference to them, as an `Array`'s buffer is.)
        let elements: UnsafeMutablePointer<Element>
        let count: Int
        /// The length of the mapping, or 0 for heap memory.
        private let mappedLength: Int

        var isMapped: Bool { mappedLength > 0 }

        init(count: Int) {
            precondition(count >= 0, "negative count")
            self.count = count
            let bytes = count * MemoryLayout<Element>.stride
            if bytes >= PlainArray.mappedFromBytes,
                let start = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), start != MAP_FAILED
            {
                mappedLength = bytes
                elements = start.bindMemory(to: Element.self, capacity: count)
            } else {
                // (Also when no pages could be mapped: the heap may still have room.)
                mappedLength = 0
                elements = .allocate(capacity: Swift.max(count, 1))
            }
        }

        deinit {
            // (Plain values: nothing to deinitialize.)
            if mappedLength > 0 {
                munmap(elements, mappedLength)
            } else {
                elements.deallocate()
            }
        }

        func copy() -> Storage {
            let copy = Storage(count: count)
            copy.elements.initialize(from: elements, count: count)
            return copy
        }
    }
}
