import Foundation
import Testing
@testable import PersistentOperations

/// The arrays of plain values that large hash tables keep their slots in.
struct PlainArrayTests {
    @Test(arguments: [0, 1, 100, 100_000])
    func elementsReadBackAsWrittenAndCopiesChangeApart(count: Int) {
        // Given an array of `count` elements, each set to its position
        var array = PlainArray<Int32>(repeating: -1, count: count)
        for index in array.indices { array[index] = Int32(index) }

        // When a copy is taken and each changes an element of its own
        var copy = array
        if count > 1 {
            array[0] = 7
            copy[count - 1] = 9
        }

        // Then each reads back what it was given, and neither sees the other's change
        #expect(array.count == count && copy.count == count)
        var matches = true
        for index in array.indices {
            let expectedOriginal: Int32 = count > 1 && index == 0 ? 7 : Int32(index)
            let expectedCopy: Int32 = count > 1 && index == count - 1 ? 9 : Int32(index)
            matches = matches && array[index] == expectedOriginal && copy[index] == expectedCopy
        }
        #expect(matches)
    }

    @Test func largeArraysSitInPagesOfTheirOwnAndSmallOnesInTheHeap() {
        // Given arrays just under and at the size from which pages are mapped
        let elements = PlainArray<Int>.mappedFromBytes / MemoryLayout<Int>.stride
        var small = PlainArray<Int>(repeating: 3, count: elements - 1)
        var large = PlainArray<Int>(repeating: 4, count: elements)

        // When each changes an element in place (through `_modify`)
        small[0] += 1
        large[elements - 1] += 1

        // Then only the large one is mapped, and both hold their values
        #expect(!small.isMapped)
        #expect(large.isMapped)
        #expect(small[0] == 4 && small[elements - 2] == 3)
        #expect(large[0] == 4 && large[elements - 1] == 5)
        // And a copy of a mapped array is mapped too, with the same values
        var copy = large
        copy[0] = 0
        #expect(copy.isMapped && copy[elements - 1] == 5 && large[0] == 4)
    }
}
