/// A binary min-heap ordered by `areInIncreasingOrder`.
struct Heap<Element: Sendable>: Sendable {
    /// The elements in heap order: the first is the smallest, the rest in no sorted order.
    private(set) var elements: [Element] = []
    private let areInIncreasingOrder: @Sendable (Element, Element) -> Bool

    init(by areInIncreasingOrder: @escaping @Sendable (Element, Element) -> Bool) {
        self.areInIncreasingOrder = areInIncreasingOrder
    }

    var count: Int { elements.count }
    var first: Element? { elements.first }

    /// Makes room for `capacity` elements in all (growing by doubling would briefly hold the
    /// old array beside the new one).
    mutating func reserveCapacity(_ capacity: Int) {
        elements.reserveCapacity(capacity)
    }

    mutating func insert(_ element: Element) {
        elements.append(element)
        var child = elements.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard areInIncreasingOrder(elements[child], elements[parent]) else { break }
            elements.swapAt(child, parent)
            child = parent
        }
    }

    mutating func popFirst() -> Element? {
        guard !elements.isEmpty else { return nil }
        elements.swapAt(0, elements.count - 1)
        let first = elements.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < elements.count, areInIncreasingOrder(elements[left], elements[smallest]) { smallest = left }
            if right < elements.count, areInIncreasingOrder(elements[right], elements[smallest]) { smallest = right }
            guard smallest != parent else { break }
            elements.swapAt(parent, smallest)
            parent = smallest
        }
        return first
    }
}
