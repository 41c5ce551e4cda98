/// The valid size of each journal segment, and their sum, kept as they change.
///
/// ```swift
/// var sizes = SegmentSizes()
/// sizes[JournalSegmentName(number: 1)] = 4096
/// sizes[JournalSegmentName(number: 2)] = 32
/// assert(sizes.total == 4128)
/// sizes[JournalSegmentName(number: 1)] = nil
/// assert(sizes.total == 32)
/// ```
struct SegmentSizes: Sendable {
    private var sizes: [JournalSegmentName: Int64] = [:]
    /// The sum of the sizes.
    private(set) var total: Int64 = 0

    /// The size of `segment`; setting `nil` forgets the segment.
    subscript(segment: JournalSegmentName) -> Int64? {
        get { sizes[segment] }
        set {
            total += (newValue ?? 0) - (sizes[segment] ?? 0)
            sizes[segment] = newValue
        }
    }

    /// The segments, in no particular order.
    var names: Dictionary<JournalSegmentName, Int64>.Keys { sizes.keys }

    /// The sum of the sizes of the segments `isIncluded` accepts (added up: for checks).
    func sum(where isIncluded: (JournalSegmentName) -> Bool) -> Int64 {
        sizes.reduce(0) { isIncluded($1.key) ? $0 + $1.value : $0 }
    }
}
